package kubeadm

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// kube-proxy is the in-cluster consumer kubeadm renders from the
// control-plane endpoint (cmd/kubeadm/app/phases/addons/proxy/proxy.go
// createKubeProxyConfigMap: kubeadmutil.GetControlPlaneEndpoint(
// cfg.ControlPlaneEndpoint, localEndpoint) into the KubeProxyConfigMap19
// template of manifests.go, whose kubeconfig.conf has `server:
// {{ .ControlPlaneEndpoint }}`). A master built without an endpoint
// gives it its own advertise address; the conversion to HA moves it to
// the endpoint (PointConsumers).
const (
	// KubeProxyConfigMap and KubeProxyDaemonSet are kube-system's
	// (cmd/kubeadm/app/constants KubeProxyConfigMap, KubeProxy).
	KubeProxyConfigMap = "kube-proxy"
	KubeProxyDaemonSet = "kube-proxy"
	// KubeProxyKubeconfigKey is the ConfigMap's key the DaemonSet mounts
	// at /var/lib/kube-proxy/kubeconfig.conf (config.conf's
	// clientConnection.kubeconfig).
	KubeProxyKubeconfigKey = "kubeconfig.conf"
	// AnnotationComponentConfigHash is kubeadm's signature of a
	// component config ConfigMap it generated (cmd/kubeadm/app/constants
	// ComponentConfigHashAnnotationKey; componentconfigs/checksums.go
	// SignConfigMap): a ConfigMap whose signature no longer matches is
	// "user supplied" to a later kubeadm upgrade
	// (componentconfigs/configset.go fromConfigMap: SetUserSupplied), so
	// an edit of a signed ConfigMap signs it again.
	AnnotationComponentConfigHash = "kubeadm.kubernetes.io/component-config.hash"
	// AnnotationKubeconfigServer on kube-proxy's pod template names the
	// server its pods were last rolled to read: setting it rolls the
	// DaemonSet once; setting it to the same value again changes nothing
	// (no new generation), so a re-run never rolls twice. kubectl
	// rollout restart's kubectl.kubernetes.io/restartedAt, a timestamp,
	// would roll on every run.
	AnnotationKubeconfigServer = "hamaster.io/kubeconfig-server"
	// AnnotationRollPending on the kube-proxy ConfigMap is set in the
	// same replace that moves kubeconfig.conf, to the server the running
	// pods started with: a roll is owed to them until the DaemonSet has
	// replaced every pod. A run that stops between the move and the roll
	// finds it and rolls.
	AnnotationRollPending = "hamaster.io/roll-pending"
)

// KubeProxyRollWait bounds PointConsumers' wait for the DaemonSet
// controller to replace kube-proxy's pods (one node at a time: a large
// cluster takes longer, and finishes without hamaster; status names the
// pods until then).
const KubeProxyRollWait = 2 * time.Minute

// ConfigMapChecksum is kubeadm's checksum of a ConfigMap as `kubectl get
// -o json` decodes it (componentconfigs/checksums.go
// ChecksumForConfigMap): SHA-256 over the data values in key order, then
// the binaryData values (base64 in JSON) in key order,
// "sha256:<hex>".
func ConfigMapChecksum(cm map[string]any) (string, error) {
	h := sha256.New()
	data, _ := cm["data"].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(data)) {
		s, ok := data[k].(string)
		if !ok {
			return "", fmt.Errorf("data %q is not a string", k)
		}
		h.Write([]byte(s))
	}
	bin, _ := cm["binaryData"].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(bin)) {
		s, _ := bin[k].(string)
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("binaryData %q: %w", k, err)
		}
		h.Write(b)
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil)), nil
}

// annotations is cm's metadata.annotations, made when create and absent.
func annotations(cm map[string]any, create bool) map[string]any {
	md, _ := cm["metadata"].(map[string]any)
	if md == nil {
		if !create {
			return nil
		}
		md = map[string]any{}
		cm["metadata"] = md
	}
	a, _ := md["annotations"].(map[string]any)
	if a == nil && create {
		a = map[string]any{}
		md["annotations"] = a
	}
	return a
}

// EditKubeProxyConfigMap moves kube-proxy's ConfigMap cm (as `kubectl
// get -o json` decodes it) to server (https://host:port): its
// kubeconfig.conf's server, nothing else of the document changed; its
// kubeadm signature renewed when it verified before the edit (a
// ConfigMap a user changed stays unsigned, as kubeadm left it); and
// AnnotationRollPending set to the server the running pods read, unless
// an earlier move already owes them a roll. changed is false when
// kubeconfig.conf names server already.
func EditKubeProxyConfigMap(cm map[string]any, server string) (changed bool, err error) {
	data, _ := cm["data"].(map[string]any)
	doc, _ := data[KubeProxyKubeconfigKey].(string)
	if doc == "" {
		return false, fmt.Errorf("kube-system/%s has no %s", KubeProxyConfigMap, KubeProxyKubeconfigKey)
	}
	old, err := KubeconfigServer([]byte(doc))
	if err != nil {
		return false, fmt.Errorf("kube-system/%s %s: %w", KubeProxyConfigMap, KubeProxyKubeconfigKey, err)
	}
	nd, changed, err := SetKubeconfigServer([]byte(doc), server)
	if err != nil || !changed {
		return false, err
	}
	sum, err := ConfigMapChecksum(cm)
	if err != nil {
		return false, fmt.Errorf("kube-system/%s: %w", KubeProxyConfigMap, err)
	}
	a := annotations(cm, true)
	signed := a[AnnotationComponentConfigHash] == sum
	data[KubeProxyKubeconfigKey] = string(nd)
	if signed {
		if a[AnnotationComponentConfigHash], err = ConfigMapChecksum(cm); err != nil {
			return false, err
		}
	}
	if p, _ := a[AnnotationRollPending].(string); p == "" {
		a[AnnotationRollPending] = old
	}
	return true, nil
}

// KubeProxyState is kube-proxy as the cluster holds it: its ConfigMap's
// kubeconfig server and roll mark, its DaemonSet's pod-template
// annotation and rollout.
type KubeProxyState struct {
	// ConfigMap reports whether kube-system/kube-proxy exists (kubeadm
	// skips kube-proxy when its ConfigMap is absent: cmd/kubeadm/app/cmd/
	// phases/upgrade/apply/addons.go runKubeProxyAddon).
	ConfigMap       bool
	ResourceVersion string
	// Server is kubeconfig.conf's server.
	Server string
	// Pending is AnnotationRollPending, "" for none.
	Pending string
	// DaemonSet reports whether kube-system/kube-proxy's DaemonSet
	// exists.
	DaemonSet bool
	// Rolled is the pod template's AnnotationKubeconfigServer.
	Rolled                         string
	Generation, ObservedGeneration int64
	// Desired and Updated are the DaemonSet's desiredNumberScheduled and
	// updatedNumberScheduled.
	Desired, Updated int
}

// What is left of kube-proxy's roll (KubeProxyState.RollLeft).
const (
	RollNone    = ""
	RollOwed    = "roll"    // the DaemonSet must be rolled
	RollRunning = "rolling" // rolled; the controller has not replaced every pod yet
)

// RollLeft is what remains before every kube-proxy pod reads Server:
// RollNone when no roll is owed (no mark, no DaemonSet, or rolled to
// Server and every pod replaced: the mark is then stale), RollOwed when
// the pod template does not name Server yet, RollRunning while the
// DaemonSet controller replaces the pods.
func (s KubeProxyState) RollLeft() string {
	switch {
	case !s.ConfigMap || s.Pending == "" || !s.DaemonSet:
		return RollNone
	case s.Rolled != s.Server:
		return RollOwed
	case s.ObservedGeneration < s.Generation || s.Updated < s.Desired:
		return RollRunning
	}
	return RollNone
}

// ParseKubeProxy reads `kubectl -n kube-system get configmap/kube-proxy
// daemonset/kube-proxy --ignore-not-found -o json`: a List, one object,
// or nothing when neither exists.
func ParseKubeProxy(out []byte) (KubeProxyState, error) {
	var s KubeProxyState
	type object struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name            string            `json:"name"`
			ResourceVersion string            `json:"resourceVersion"`
			Generation      int64             `json:"generation"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"template"`
		} `json:"spec"`
		Status struct {
			ObservedGeneration     int64 `json:"observedGeneration"`
			DesiredNumberScheduled int   `json:"desiredNumberScheduled"`
			UpdatedNumberScheduled int   `json:"updatedNumberScheduled"`
		} `json:"status"`
		Items []json.RawMessage `json:"items"`
	}
	if len(strings.TrimSpace(string(out))) == 0 {
		return s, nil
	}
	var top object
	if err := json.Unmarshal(out, &top); err != nil {
		return s, fmt.Errorf("kube-proxy: %w", err)
	}
	objs := []object{top}
	if top.Kind == "List" {
		objs = nil
		for _, raw := range top.Items {
			var o object
			if err := json.Unmarshal(raw, &o); err != nil {
				return s, fmt.Errorf("kube-proxy: %w", err)
			}
			objs = append(objs, o)
		}
	}
	for _, o := range objs {
		switch o.Kind {
		case "ConfigMap":
			s.ConfigMap, s.ResourceVersion = true, o.Metadata.ResourceVersion
			s.Pending = o.Metadata.Annotations[AnnotationRollPending]
			if doc := o.Data[KubeProxyKubeconfigKey]; doc != "" {
				srv, err := KubeconfigServer([]byte(doc))
				if err != nil {
					return s, fmt.Errorf("kube-system/%s %s: %w", KubeProxyConfigMap, KubeProxyKubeconfigKey, err)
				}
				s.Server = srv
			}
		case "DaemonSet":
			s.DaemonSet = true
			s.Rolled = o.Spec.Template.Metadata.Annotations[AnnotationKubeconfigServer]
			s.Generation, s.ObservedGeneration = o.Metadata.Generation, o.Status.ObservedGeneration
			s.Desired, s.Updated = o.Status.DesiredNumberScheduled, o.Status.UpdatedNumberScheduled
		}
	}
	return s, nil
}

// kubeProxyGet reads kube-proxy's ConfigMap and DaemonSet at once.
const kubeProxyGet = adminKubectl + "-n kube-system get configmap/" + KubeProxyConfigMap + " daemonset/" + KubeProxyDaemonSet + " --ignore-not-found -o json"

// KubeProxy reads kube-proxy's state through master. Read-only.
func (f *Flavor) KubeProxy(ctx context.Context, master string) (KubeProxyState, error) {
	out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), master, kubeProxyGet)
	if err != nil {
		return KubeProxyState{}, fmt.Errorf("read kube-proxy on %s: %w (stderr: %s)", master, err, tail(stderr))
	}
	s, err := ParseKubeProxy(out)
	if err != nil {
		return s, fmt.Errorf("read kube-proxy on %s: %w", master, err)
	}
	return s, nil
}

// PointConsumers implements flavors.EndpointMover: kube-proxy's
// kubeconfig.conf moved to https://endpoint in its ConfigMap (through
// editConfigMapObject: resourceVersion-guarded, kubeadm's signature
// renewed, the roll mark set in the same replace), then its DaemonSet
// rolled so that its pods read it: kube-proxy reads its kubeconfig once,
// when it starts (cmd/kube-proxy/app/server.go: the client is built at
// start; the only file it watches is --config, and a ConfigMap volume's
// update replaces the watched inode), so a moved ConfigMap alone leaves
// every running pod on the old server.
//
// kubeadm itself never rolls kube-proxy for a ConfigMap change: its
// upgrade re-renders the ConfigMap and the DaemonSet
// (cmd/kubeadm/app/phases/addons/proxy/proxy.go EnsureProxyAddon,
// called by cmd/kubeadm/app/cmd/phases/upgrade/apply/addons.go
// runKubeProxyAddon) and replaces the DaemonSet whole
// (cmd/kubeadm/app/util/apiclient/idempotency.go CreateOrUpdateDaemonSet:
// Update of the rendered object), so its pods roll only because the
// template changed (the image). The roll here is a pod-template
// annotation (AnnotationKubeconfigServer) naming the server, set by
// kubectl patch: the same value again is no change, so a resumed run
// does not roll twice, and the ConfigMap's AnnotationRollPending makes
// a run that stopped before the patch roll on the next one. A later
// kubeadm upgrade drops the annotation with the rest of the template;
// it renders kubeconfig.conf from kubeadm-config's controlPlaneEndpoint,
// which SetEndpoint has set, and its new image rolls the pods.
//
// The DaemonSet controller replaces the pods (one node at a time,
// kubeadm's RollingUpdate); PointConsumers waits KubeProxyRollWait for
// it, then leaves it to finish (status names the pods until then). No
// kube-proxy ConfigMap (kube-proxy skipped, or replaced by a CNI's
// own): nothing to move, as kubeadm's upgrade assumes.
//
// Then the workers (PointWorkers): each worker's kubelet.conf that
// names one master's own address, one worker at a time.
func (f *Flavor) PointConsumers(ctx context.Context, endpoint string) error {
	if err := f.pointKubeProxy(ctx, endpoint); err != nil {
		return err
	}
	return f.PointWorkers(ctx, endpoint)
}

// pointKubeProxy is PointConsumers for kube-proxy.
func (f *Flavor) pointKubeProxy(ctx context.Context, endpoint string) error {
	if _, err := SplitEndpoint(endpoint); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "endpoint %q: %v", endpoint, err)
	}
	server := "https://" + endpoint
	if _, _, err := SetKubeconfigServer(minimalKubeconfig, server); err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "endpoint %q: %v", endpoint, err)
	}
	master, err := f.firstRunning(ctx, "move kube-proxy through")
	if err != nil {
		return err
	}
	st, err := f.KubeProxy(ctx, master)
	if err != nil {
		return err
	}
	if !st.ConfigMap {
		f.log.Info("no kube-proxy ConfigMap: kube-proxy is not kubeadm's here, nothing to move", "configmap", "kube-system/"+KubeProxyConfigMap)
		return nil
	}
	if st.Server != server {
		if err := f.editConfigMapObject(ctx, master, "kube-system", KubeProxyConfigMap, func(cm map[string]any) (bool, error) {
			return EditKubeProxyConfigMap(cm, server)
		}); err != nil {
			return fmt.Errorf("move kube-proxy's kubeconfig to %s: %w", server, err)
		}
		f.log.Info("kube-proxy's kubeconfig moved to the endpoint", "configmap", "kube-system/"+KubeProxyConfigMap, "from", st.Server, "server", server)
		if st, err = f.KubeProxy(ctx, master); err != nil {
			return err
		}
	}
	return f.rollKubeProxy(ctx, master, st)
}

// rollKubeProxy rolls kube-proxy's DaemonSet when st owes its pods a
// roll, waits a while for the pods to be replaced, and clears the mark
// once they are.
func (f *Flavor) rollKubeProxy(ctx context.Context, master string, st KubeProxyState) error {
	if st.Pending == "" {
		return nil
	}
	if !st.DaemonSet {
		f.log.Info("no kube-proxy DaemonSet: nothing to roll", "daemonset", "kube-system/"+KubeProxyDaemonSet)
		return f.clearRollMark(ctx, master, st)
	}
	if st.RollLeft() == RollOwed {
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationKubeconfigServer: st.Server}}}}})
		if err != nil {
			return err
		}
		f.log.Info("rolling kube-proxy so that its pods read the moved kubeconfig", "daemonset", "kube-system/"+KubeProxyDaemonSet, "server", st.Server, "pods_read", st.Pending)
		if _, stderr, err := f.m.RunOnMachine(ctx, master, adminKubectl+"-n kube-system patch daemonset "+KubeProxyDaemonSet+" --type=merge -p "+remote.ShellQuote(string(patch))); err != nil {
			return fmt.Errorf("roll kube-system/%s on %s: %w (stderr: %s)", KubeProxyDaemonSet, master, err, tail(stderr))
		}
	}
	wctx, cancel := context.WithTimeout(ctx, KubeProxyRollWait)
	defer cancel()
	start := time.Now()
	err := wait.Until(wctx, 2*time.Second, "kube-proxy's pods to be replaced", func() (bool, error) {
		s, err := f.KubeProxy(wctx, master)
		if err != nil {
			return false, nil // read again
		}
		st = s
		return st.RollLeft() == RollNone, nil
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		f.log.Info("kube-proxy still rolling: the DaemonSet controller finishes it (status names its pods until then)", "updated", st.Updated, "desired", st.Desired, "waited", time.Since(start).Round(time.Second))
		return nil
	}
	f.log.Info("kube-proxy rolled", "pods", st.Desired, "waited", time.Since(start).Round(time.Millisecond))
	return f.clearRollMark(ctx, master, st)
}

// clearRollMark removes AnnotationRollPending from the ConfigMap as st
// read it (its resourceVersion): a ConfigMap moved again meanwhile keeps
// the mark that move set.
func (f *Flavor) clearRollMark(ctx context.Context, master string, st KubeProxyState) error {
	if st.Pending == "" {
		return nil
	}
	cmd := adminKubectl + "-n kube-system annotate configmap " + KubeProxyConfigMap + " " + AnnotationRollPending + "- --resource-version=" + remote.ShellQuote(st.ResourceVersion)
	if _, stderr, err := f.m.RunOnMachine(ctx, master, cmd); err != nil {
		return fmt.Errorf("clear %s on kube-system/%s through %s: %w (stderr: %s)", AnnotationRollPending, KubeProxyConfigMap, master, err, tail(stderr))
	}
	return nil
}
