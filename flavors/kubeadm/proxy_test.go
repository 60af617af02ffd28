package kubeadm

import (
	"encoding/json"
	"strings"
	"testing"
)

// kubeProxyCM is kubeadm's kube-proxy ConfigMap as `kubectl get -o json`
// prints it on a master built by `kubeadm init` v1.33.13 without an
// endpoint (testdata/README.md), decoded afresh for each use.
func kubeProxyCM(t *testing.T) map[string]any {
	t.Helper()
	var cm map[string]any
	if err := json.Unmarshal(fixture(t, "kube-proxy-configmap.json"), &cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

func cmData(cm map[string]any, key string) string {
	s, _ := cm["data"].(map[string]any)[key].(string)
	return s
}

func cmAnnotation(cm map[string]any, key string) (string, bool) {
	a := annotations(cm, false)
	v, ok := a[key].(string)
	return v, ok
}

// TestConfigMapChecksum: kubeadm's own signature of the ConfigMap it
// wrote verifies (the algorithm is kubeadm's, not only self-consistent);
// a changed value changes it.
func TestConfigMapChecksum(t *testing.T) {
	t.Parallel()
	cm := kubeProxyCM(t)
	sig, ok := cmAnnotation(cm, AnnotationComponentConfigHash)
	if !ok {
		t.Fatal("the fixture carries no kubeadm signature")
	}
	got, err := ConfigMapChecksum(cm)
	if err != nil || got != sig {
		t.Fatalf("ConfigMapChecksum = %q, %v; kubeadm signed %q", got, err, sig)
	}
	cm["data"].(map[string]any)["config.conf"] = cmData(cm, "config.conf") + "\n"
	if again, _ := ConfigMapChecksum(cm); again == sig {
		t.Error("a changed value keeps the checksum")
	}
	cm["binaryData"] = map[string]any{"b": "!!"}
	if _, err := ConfigMapChecksum(cm); err == nil {
		t.Error("binaryData that is not base64 was accepted")
	}
}

// TestEditKubeProxyConfigMap: the edit on kubeadm's real ConfigMap moves
// kubeconfig.conf's server and nothing else of it (config.conf, the CA
// and token paths untouched), renews kubeadm's signature when it
// verified (so a later kubeadm upgrade still treats the config as its
// own), leaves a user-changed ConfigMap unsigned, and marks the roll
// owed to the pods with the server they read; a second edit changes
// nothing, and an edit before an owed roll keeps the first mark.
func TestEditKubeProxyConfigMap(t *testing.T) {
	t.Parallel()
	const vip = "https://10.0.0.100:8443"
	orig := kubeProxyCM(t)
	origServer, err := KubeconfigServer([]byte(cmData(orig, KubeProxyKubeconfigKey)))
	if err != nil {
		t.Fatal(err)
	}
	origSig, _ := cmAnnotation(orig, AnnotationComponentConfigHash)
	tests := []struct {
		name string
		prep func(cm map[string]any)
		// want: changed; the signature after (signed: valid and new,
		// "kept": as before, "none": absent); the mark after.
		changed  bool
		sig      string
		pending  string
		wantErrs string
	}{
		{name: "kubeadm's, signed", changed: true, sig: "signed", pending: origServer},
		{name: "already on the endpoint", prep: func(cm map[string]any) {
			doc, _, _ := SetKubeconfigServer([]byte(cmData(cm, KubeProxyKubeconfigKey)), vip)
			cm["data"].(map[string]any)[KubeProxyKubeconfigKey] = string(doc)
		}, changed: false, sig: "kept"},
		{name: "changed by a user: stays unsigned", prep: func(cm map[string]any) {
			cm["data"].(map[string]any)["config.conf"] = cmData(cm, "config.conf") + "\n# mine"
		}, changed: true, sig: "kept", pending: origServer},
		{name: "never signed", prep: func(cm map[string]any) {
			delete(annotations(cm, false), AnnotationComponentConfigHash)
		}, changed: true, sig: "none", pending: origServer},
		{name: "a roll still owed: its mark kept", prep: func(cm map[string]any) {
			annotations(cm, true)[AnnotationRollPending] = "https://10.0.0.9:6443"
		}, changed: true, sig: "signed", pending: "https://10.0.0.9:6443"},
		{name: "no kubeconfig.conf", prep: func(cm map[string]any) {
			delete(cm["data"].(map[string]any), KubeProxyKubeconfigKey)
		}, wantErrs: "has no kubeconfig.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cm := kubeProxyCM(t)
			if tt.prep != nil {
				tt.prep(cm)
			}
			before, _ := json.Marshal(cm)
			beforeDoc := cmData(cm, KubeProxyKubeconfigKey)
			beforeSig, hadSig := cmAnnotation(cm, AnnotationComponentConfigHash)
			changed, err := EditKubeProxyConfigMap(cm, vip)
			if tt.wantErrs != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrs) {
					t.Fatalf("err %v; want %q", err, tt.wantErrs)
				}
				return
			}
			if err != nil || changed != tt.changed {
				t.Fatalf("EditKubeProxyConfigMap = %v, %v; want %v", changed, err, tt.changed)
			}
			if !changed {
				if after, _ := json.Marshal(cm); string(after) != string(before) {
					t.Errorf("an edit that changes nothing changed the object:\n%s\n%s", before, after)
				}
				return
			}
			doc := cmData(cm, KubeProxyKubeconfigKey)
			if srv, _ := KubeconfigServer([]byte(doc)); srv != vip {
				t.Errorf("server %q after the edit; want %s", srv, vip)
			}
			// Only the server line differs, as kubeadm's template wrote it.
			bl, al := strings.Split(beforeDoc, "\n"), strings.Split(doc, "\n")
			if len(bl) != len(al) {
				t.Fatalf("the document's lines: %d, were %d", len(al), len(bl))
			}
			for i := range bl {
				if bl[i] != al[i] && !(strings.Contains(bl[i], "server: ") && al[i] == "    server: "+vip) {
					t.Errorf("line %d changed: %q → %q", i+1, bl[i], al[i])
				}
			}
			if cmData(cm, "config.conf") != cmData(kubeProxyCM(t), "config.conf") && tt.name != "changed by a user: stays unsigned" {
				t.Error("config.conf changed")
			}
			sig, hasSig := cmAnnotation(cm, AnnotationComponentConfigHash)
			switch tt.sig {
			case "signed":
				if sum, _ := ConfigMapChecksum(cm); sig != sum || sig == origSig {
					t.Errorf("signature %q; want the new checksum %q (not the old %q)", sig, sum, origSig)
				}
			case "kept":
				if sig != beforeSig || hasSig != hadSig {
					t.Errorf("signature %q (%v); want it kept %q (%v)", sig, hasSig, beforeSig, hadSig)
				}
			case "none":
				if hasSig {
					t.Errorf("a signature %q was added to an unsigned ConfigMap", sig)
				}
			}
			if p, _ := cmAnnotation(cm, AnnotationRollPending); p != tt.pending {
				t.Errorf("roll mark %q; want %q", p, tt.pending)
			}
			// Idempotent: the same edit again changes nothing.
			if again, err := EditKubeProxyConfigMap(cm, vip); again || err != nil {
				t.Errorf("a second edit: %v, %v", again, err)
			}
		})
	}
	if _, err := EditKubeProxyConfigMap(orig, "http://10.0.0.100:8443"); err == nil {
		t.Error("a server that is not https://host:port was accepted")
	}
}

// kubeProxyList is `kubectl get configmap/kube-proxy daemonset/kube-proxy
// -o json` with the fields ParseKubeProxy reads.
func kubeProxyList(server, pending, rolled string, gen, observed int64, desired, updated int) string {
	cmAnn := map[string]string{AnnotationComponentConfigHash: "sha256:x"}
	if pending != "" {
		cmAnn[AnnotationRollPending] = pending
	}
	tplAnn := map[string]string{}
	if rolled != "" {
		tplAnn[AnnotationKubeconfigServer] = rolled
	}
	kc := "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n    server: " + server + "\n  name: default\n"
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{
		map[string]any{"kind": "ConfigMap", "apiVersion": "v1", "metadata": map[string]any{"name": "kube-proxy", "resourceVersion": "236", "annotations": cmAnn}, "data": map[string]string{"config.conf": "x", KubeProxyKubeconfigKey: kc}},
		map[string]any{"kind": "DaemonSet", "apiVersion": "apps/v1", "metadata": map[string]any{"name": "kube-proxy", "generation": gen},
			"spec":   map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"k8s-app": "kube-proxy"}, "annotations": tplAnn}}},
			"status": map[string]any{"observedGeneration": observed, "desiredNumberScheduled": desired, "updatedNumberScheduled": updated}},
	}}
	b, _ := json.Marshal(list)
	return string(b)
}

// TestKubeProxyRollLeft: the roll is owed from the ConfigMap's move
// (its mark) until the pod template names the server and the controller
// has replaced every pod; a mark left by a run that stopped after the
// roll is stale, and no DaemonSet owes nothing.
func TestKubeProxyRollLeft(t *testing.T) {
	t.Parallel()
	const old, vip = "https://10.0.0.11:6443", "https://10.0.0.100:8443"
	cmOnly := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"kube-proxy","resourceVersion":"9","annotations":{"` + AnnotationRollPending + `":"` + old + `"}},"data":{"kubeconfig.conf":"clusters:\n- cluster:\n    server: ` + vip + `\n"}}`
	tests := []struct {
		name, out string
		want      string
		cm, ds    bool
	}{
		{"neither (kube-proxy skipped)", "", RollNone, false, false},
		{"an empty List", `{"apiVersion":"v1","items":[],"kind":"List"}`, RollNone, false, false},
		{"ConfigMap alone", cmOnly, RollNone, true, false},
		{"never moved", kubeProxyList(old, "", "", 1, 1, 3, 3), RollNone, true, true},
		{"moved, not rolled", kubeProxyList(vip, old, "", 1, 1, 3, 3), RollOwed, true, true},
		{"moved again after a roll to another", kubeProxyList(vip, old, "https://lb:6443", 2, 2, 3, 3), RollOwed, true, true},
		{"rolled, not observed yet", kubeProxyList(vip, old, vip, 2, 1, 3, 3), RollRunning, true, true},
		{"rolled, pods being replaced", kubeProxyList(vip, old, vip, 2, 2, 3, 1), RollRunning, true, true},
		{"rolled, done: the mark is stale", kubeProxyList(vip, old, vip, 2, 2, 3, 3), RollNone, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, err := ParseKubeProxy([]byte(tt.out))
			if err != nil {
				t.Fatal(err)
			}
			if st.ConfigMap != tt.cm || st.DaemonSet != tt.ds {
				t.Errorf("ConfigMap %v DaemonSet %v; want %v %v", st.ConfigMap, st.DaemonSet, tt.cm, tt.ds)
			}
			if got := st.RollLeft(); got != tt.want {
				t.Errorf("RollLeft = %q; want %q (state %+v)", got, tt.want, st)
			}
		})
	}
	st, err := ParseKubeProxy([]byte(kubeProxyList(vip, old, "", 4, 4, 2, 2)))
	if err != nil || st.Server != vip || st.Pending != old || st.ResourceVersion != "236" || st.Generation != 4 || st.Desired != 2 {
		t.Errorf("ParseKubeProxy = %+v, %v", st, err)
	}
	if _, err := ParseKubeProxy([]byte("{")); err == nil {
		t.Error("broken JSON was accepted")
	}
}
