package kubeadm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

var _ flavors.PinFinder = (*Flavor)(nil)

// PinnedKubeconfigs are the kubeconfigs under /etc/kubernetes the pin
// check reads on every master: those kubeadm renders from the
// control-plane endpoint (EndpointKubeconfigs) and those it renders on
// the master's own apiserver (LocalKubeconfigs).
var PinnedKubeconfigs = []string{"admin.conf", "super-admin.conf", "kubelet.conf", "controller-manager.conf", "scheduler.conf"}

// LocalKubeconfigs are rendered on the master's own apiserver since
// v1.29 (cmd/kubeadm/app/phases/kubeconfig/kubeconfig.go
// getKubeConfigSpecsBase: APIServer localAPIEndpoint): the component
// runs beside that apiserver, so its own address is no pin; another
// master's is.
var LocalKubeconfigs = []string{"controller-manager.conf", "scheduler.conf"}

// PinMaster is one of the provider's machines as the pin check matches
// servers against it.
type PinMaster struct {
	Replica, Node, Address string
}

// PinInput is everything the pin check reads; FindPins decides from it
// alone.
type PinInput struct {
	// Endpoint is kubeadm-config's controlPlaneEndpoint, "" for none.
	Endpoint string
	// MoveTo is where an endpoint that is one master's own address
	// should move (the static IP or VIP, host:port), "" when unknown.
	MoveTo  string
	Masters []PinMaster
	// ClusterInfo is kube-public/cluster-info's server, "" when absent.
	ClusterInfo string
	KubeProxy   KubeProxyState
	// Servers maps a master (its replica name) to each kubeconfig of
	// PinnedKubeconfigs on it and the server it names.
	Servers map[string]map[string]string
	// Workers maps each worker the provider knows to the server its
	// WorkerKubeconfig names ("" for none).
	Workers map[string]string
	// FormerEndpoints are the endpoints the cluster had before this one
	// (kubeadm-config's AnnotationFormerEndpoints).
	FormerEndpoints []string
}

// EndpointFix is the command that moves every consumer to endpoint
// (host:port): `hamaster endpoint set` with the endpoint the masters
// record already runs the conversion again, each of its steps
// idempotent (the certificates, kubeadm-config and cluster-info,
// kube-proxy, each master's kubeconfigs: workflows/joiner.go
// moveEndpoint), and so moves what was left behind.
func EndpointFix(endpoint string) string {
	return "hamaster endpoint set --yes " + endpoint
}

// KubeProxyRollFix is what to do while kube-proxy's DaemonSet replaces
// its pods: wait for the roll, on a master.
const KubeProxyRollFix = "wait for the roll: `kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system rollout status daemonset/kube-proxy` on a master"

// serverHost is the host a server names (https://host:port, host:port
// or a host alone).
func serverHost(server string) string {
	if u, err := url.Parse(server); err == nil && u.Host != "" {
		return u.Hostname()
	}
	if h, _, err := net.SplitHostPort(server); err == nil {
		return h
	}
	return strings.Trim(server, "[]")
}

// isLoopback reports whether host is the machine's own loopback.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// masterNamed is the master whose own address (or Node or replica name)
// server names, "" for none.
func masterNamed(ms []PinMaster, server string) string {
	h := serverHost(server)
	if h == "" {
		return ""
	}
	for _, m := range ms {
		if (m.Address != "" && sameSAN(h, m.Address)) || (m.Node != "" && strings.EqualFold(h, m.Node)) || strings.EqualFold(h, m.Replica) {
			return m.Replica
		}
	}
	return ""
}

// FindPins lists the consumers in in that name one master's own address
// where kubeadm init --control-plane-endpoint would have named the
// endpoint, none when the masters record no endpoint:
//   - kubeadm-config's controlPlaneEndpoint itself, when it is one
//     master's own address (every consumer rendered from it then names
//     that master: the fix moves the endpoint to in.MoveTo);
//   - kube-public/cluster-info's server (what later joins read:
//     cmd/kubeadm/app/phases/bootstraptoken/clusterinfo copies admin.conf's
//     cluster);
//   - kube-system/kube-proxy's kubeconfig.conf (phases/addons/proxy), and
//     its pods while a roll is owed to them since it moved;
//   - on each master, admin.conf, super-admin.conf and kubelet.conf as
//     the conversion would move them (KubeconfigMoves: a kubelet.conf on
//     its own apiserver is kubeadm's ControlPlaneKubeletLocalMode, no
//     pin), and controller-manager.conf and scheduler.conf that name
//     another master than their own (kubeadm renders them on the
//     master's own apiserver; hamaster does not move them);
//   - each worker's kubelet.conf (workers.go: kubeadm never moves it),
//     and one that names a former endpoint of the cluster (former.go),
//     whose pin names no master.
//
// Each pin carries the command that moves it.
func FindPins(in PinInput) []flavors.Pin {
	if in.Endpoint == "" {
		return nil
	}
	ep, err := SplitEndpoint(in.Endpoint)
	if err != nil {
		return nil
	}
	if ep.Port == 0 {
		ep.Port = DefaultBindPort
	}
	endpointURL := "https://" + ep.String()
	fix := EndpointFix(ep.String())
	var pins []flavors.Pin
	if m := masterNamed(in.Masters, in.Endpoint); m != "" {
		fix = EndpointFix("ADDRESS|NAME[:PORT]") + " (an address in front of every apiserver: a VIP or load balancer)"
		endpointURL = "" // every consumer on it is pinned
		if in.MoveTo != "" {
			fix = EndpointFix(in.MoveTo)
			endpointURL = "https://" + in.MoveTo
		}
		pins = append(pins, flavors.Pin{Consumer: "kube-system/kubeadm-config controlPlaneEndpoint", Server: in.Endpoint, Master: m, Fix: fix})
	}
	if m := masterNamed(in.Masters, in.ClusterInfo); m != "" {
		pins = append(pins, flavors.Pin{Consumer: "kube-public/cluster-info kubeconfig", Server: in.ClusterInfo, Master: m, Fix: fix})
	}
	if kp := in.KubeProxy; kp.ConfigMap {
		if m := masterNamed(in.Masters, kp.Server); m != "" {
			pins = append(pins, flavors.Pin{Consumer: "kube-system/" + KubeProxyConfigMap + " ConfigMap " + KubeProxyKubeconfigKey, Server: kp.Server, Master: m, Fix: fix})
		}
		if m := masterNamed(in.Masters, kp.Pending); m != "" {
			switch kp.RollLeft() {
			case RollOwed:
				pins = append(pins, flavors.Pin{Consumer: "kube-system/" + KubeProxyDaemonSet + " pods (started before " + KubeProxyKubeconfigKey + " moved; not rolled yet)", Server: kp.Pending, Master: m, Fix: fix})
			case RollRunning:
				pins = append(pins, flavors.Pin{Consumer: fmt.Sprintf("kube-system/%s pods not replaced yet (%d of %d updated)", KubeProxyDaemonSet, kp.Updated, kp.Desired), Server: kp.Pending, Master: m, Fix: KubeProxyRollFix})
			}
		}
	}
	for _, own := range in.Masters {
		servers := in.Servers[own.Replica]
		local := "https://" + net.JoinHostPort(own.Address, strconv.Itoa(DefaultBindPort))
		for _, name := range PinnedKubeconfigs {
			srv, ok := servers[name]
			if !ok || srv == "" {
				continue
			}
			m := masterNamed(in.Masters, srv)
			if m == "" && isLoopback(serverHost(srv)) {
				m = own.Replica
			}
			if m == "" {
				continue
			}
			p := flavors.Pin{Consumer: KubernetesDir + "/" + name, On: own.Replica, Server: srv, Master: m, Fix: fix}
			switch {
			case slices.Contains(LocalKubeconfigs, name):
				if m == own.Replica {
					continue
				}
				p.Fix = fmt.Sprintf("by hand (hamaster does not move it): on %s set its server to the master's own apiserver %s, as kubeadm renders it, and restart the component (its manifest out of %s and back)", own.Replica, local, ManifestsDir)
			case !KubeconfigMoves(name, srv, local, endpointURL):
				continue
			}
			pins = append(pins, p)
		}
	}
	return append(pins, workerPins(in.Masters, ep.String(), in.FormerEndpoints, in.Workers, fix)...)
}

// Pinned implements flavors.PinFinder: kubeadm-config, cluster-info and
// kube-proxy read through a running master not in exclude, and each
// running master's kubeconfigs (not those of exclude), set against the
// provider's machines (FindPins). A master that cannot be read fails it:
// what it names is unknown.
//
// A worker that cannot be read fails it too, but the pins found on the
// rest are returned with that error: status shows both.
func (f *Flavor) Pinned(ctx context.Context, exclude ...string) ([]flavors.Pin, error) {
	in, workersErr, err := f.pinInput(ctx, exclude)
	if err != nil {
		return nil, err
	}
	return FindPins(in), workersErr
}

// pinObjects reads, in one session, what the pin check reads of the
// cluster: kubeadm-config's ClusterConfiguration, cluster-info's
// kubeconfig and kube-proxy (kubeProxyGet), each base64 on a line.
const pinObjects = `set -e
cc=$(` + adminKubectl + `-n kube-system get configmap kubeadm-config -o json)
ci=$(` + adminKubectl + `-n kube-public get configmap cluster-info --ignore-not-found -o jsonpath='{.data.kubeconfig}')
kp=$(` + kubeProxyGet + `)
for v in "$cc" "$ci" "$kp"; do printf %s "$v" | base64 -w0; echo; done
`

// kubeconfigServers prints, for each of PinnedKubeconfigs on the master,
// its name and the first server it names (the servers only: no key
// leaves the master).
const kubeconfigServers = `for f in admin.conf super-admin.conf kubelet.conf controller-manager.conf scheduler.conf; do
  p=` + KubernetesDir + `/$f
  [ -e "$p" ] || continue
  printf '%s %s\n' "$f" "$(sed -n 's/^[[:space:]]*server:[[:space:]]*//p' "$p" | head -n 1)"
done
`

// ParseKubeconfigServers reads kubeconfigServers' output: file → server.
func ParseKubeconfigServers(out []byte) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		name, srv, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok || !slices.Contains(PinnedKubeconfigs, name) {
			continue
		}
		m[name] = strings.Trim(strings.TrimSpace(srv), `"'`)
	}
	return m
}

// pinInput reads what FindPins decides from; workersErr names the
// workers that could not be read (in has the others).
func (f *Flavor) pinInput(ctx context.Context, exclude []string) (in PinInput, workersErr, err error) {
	all, err := f.p.Instances().List(ctx)
	if err != nil {
		return in, nil, err
	}
	var through []providers.Replica
	for _, r := range all {
		in.Masters = append(in.Masters, PinMaster{Replica: r.Name, Node: f.m.MachineHostname(r.Name, r.Address), Address: r.Address})
		if r.Running() && !slices.Contains(exclude, r.Name) {
			through = append(through, r)
		}
	}
	if len(through) == 0 {
		return in, nil, errkind.Errorf(errkind.Unavailable, "no running master to read kubeadm-config and kube-proxy through (excluding %v)", exclude)
	}
	if err := throughFirst(through, func(master string) error { return f.readPinObjects(ctx, master, &in) }); err != nil {
		return in, nil, errkind.Errorf(errkind.Unavailable, "no master's admin.conf answers: %w", err)
	}
	if in.Endpoint == "" {
		return in, nil, nil // no endpoint: nothing to point at
	}
	if masterNamed(in.Masters, in.Endpoint) != "" {
		if ip, _, err := f.p.StaticIP().Get(ctx); err == nil && ip != "" {
			in.MoveTo = net.JoinHostPort(ip, strconv.Itoa(providers.EndpointPortOf(f.p)))
		}
	}
	in.Servers = map[string]map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, r := range through {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), r.Name, "sh -c "+remote.ShellQuote(kubeconfigServers))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("master %s: read the servers of its kubeconfigs: %w (stderr: %s)", r.Name, err, tail(stderr)))
				return
			}
			in.Servers[r.Name] = ParseKubeconfigServers(out)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return in, nil, err
	}
	ws, err := f.workers(ctx)
	if err != nil {
		return in, nil, err
	}
	to := in.Endpoint
	if in.MoveTo != "" {
		to = in.MoveTo
	}
	in.Workers, workersErr = f.readWorkers(ctx, ws, "https://"+to)
	return in, workersErr, nil
}

// readPinObjects reads pinObjects through master into in.
func (f *Flavor) readPinObjects(ctx context.Context, master string, in *PinInput) error {
	out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), master, "sh -c "+remote.ShellQuote(pinObjects))
	if err != nil {
		return fmt.Errorf("read kubeadm-config, cluster-info and kube-proxy on %s: %w (stderr: %s)", master, err, tail(stderr))
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 3 {
		return fmt.Errorf("read kubeadm-config, cluster-info and kube-proxy on %s: %d documents in the answer, want 3", master, len(lines))
	}
	docs := make([][]byte, 3)
	for i, l := range lines {
		if docs[i], err = base64.StdEncoding.DecodeString(l); err != nil {
			return fmt.Errorf("read kubeadm-config, cluster-info and kube-proxy on %s: %w", master, err)
		}
	}
	var cm struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Data struct {
			ClusterConfiguration string `json:"ClusterConfiguration"`
		} `json:"data"`
	}
	if err := json.Unmarshal(docs[0], &cm); err != nil {
		return fmt.Errorf("kubeadm-config on %s: %w", master, err)
	}
	cc, err := ParseClusterConfiguration([]byte(cm.Data.ClusterConfiguration))
	if err != nil {
		return fmt.Errorf("kubeadm-config on %s: %w", master, err)
	}
	in.Endpoint = cc.ControlPlaneEndpoint
	in.FormerEndpoints = ParseFormerEndpoints(cm.Metadata.Annotations[AnnotationFormerEndpoints])
	if len(docs[1]) > 0 {
		if in.ClusterInfo, err = KubeconfigServer(docs[1]); err != nil {
			return fmt.Errorf("kube-public/cluster-info on %s: %w", master, err)
		}
	}
	if in.KubeProxy, err = ParseKubeProxy(docs[2]); err != nil {
		return fmt.Errorf("on %s: %w", master, err)
	}
	return nil
}
