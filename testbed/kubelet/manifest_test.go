package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseStaticPodDefaults(t *testing.T) {
	sp, err := ParseStaticPod(readTestdata(t, "etcd.yaml"), "/etc/kubernetes/manifests/etcd.yaml", "host-a")
	if err != nil {
		t.Fatal(err)
	}
	p := sp.Pod
	if p.Name != "etcd-host-a" || p.Namespace != "kube-system" || p.Spec.NodeName != "host-a" {
		t.Errorf("pod %s/%s on %q, want kube-system/etcd-host-a on host-a", p.Namespace, p.Name, p.Spec.NodeName)
	}
	if len(sp.Hash) != 32 || string(p.UID) != sp.Hash || p.Annotations[ConfigHashAnnotation] != sp.Hash {
		t.Errorf("hash %q, uid %q, annotation %q", sp.Hash, p.UID, p.Annotations[ConfigHashAnnotation])
	}
	if p.Annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"] != "https://10.0.0.2:2379" || p.Labels["component"] != "etcd" {
		t.Errorf("manifest's annotations/labels lost: %v %v", p.Annotations, p.Labels)
	}
	if p.Annotations[ConfigSourceAnnotation] != FileSource || p.Status.Phase != corev1.PodPending {
		t.Errorf("source %q phase %q", p.Annotations[ConfigSourceAnnotation], p.Status.Phase)
	}
	last := p.Spec.Tolerations[len(p.Spec.Tolerations)-1]
	if last.Operator != corev1.TolerationOpExists || last.Effect != corev1.TaintEffectNoExecute {
		t.Errorf("no NoExecute toleration: %v", p.Spec.Tolerations)
	}
}

func TestStaticPodHash(t *testing.T) {
	data := readTestdata(t, "kube-apiserver.yaml")
	hash := func(data []byte, file, node string) string {
		t.Helper()
		sp, err := ParseStaticPod(data, file, node)
		if err != nil {
			t.Fatal(err)
		}
		return sp.Hash
	}
	const file = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	base := hash(data, file, "host-a")
	// The same pod written differently (kubeadm rewrites the file on
	// upgrade; comments and field order do not change the pod).
	reordered := strings.Replace(string(data), "# kubeadm", "# another comment\n# kubeadm", 1)
	reordered = strings.Replace(reordered, "  labels:\n    component: kube-apiserver\n    tier: control-plane\n", "  labels:\n    tier: control-plane\n    component: kube-apiserver\n", 1)
	tests := []struct {
		name       string
		data       string
		file, node string
		same       bool
	}{
		{name: "same manifest again", data: string(data), file: file, node: "host-a", same: true},
		{name: "comment and map order", data: reordered, file: file, node: "host-a", same: true},
		{name: "new image (upgrade)", data: strings.Replace(string(data), "v1.33.13", "v1.34.4", 1), file: file, node: "host-a"},
		{name: "new flag", data: strings.Replace(string(data), "    - --secure-port=6443\n", "    - --secure-port=6443\n    - --v=2\n", 1), file: file, node: "host-a"},
		{name: "other node", data: string(data), file: file, node: "host-b"},
		{name: "other file", data: string(data), file: file + ".bak", node: "host-a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := hash([]byte(tc.data), tc.file, tc.node); (got == base) != tc.same {
				t.Errorf("hash %s vs %s: same = %v, want %v", got, base, got == base, tc.same)
			}
		})
	}
}

func TestReadStaticPods(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("etcd.yaml", readTestdata(t, "etcd.yaml"))
	write("kube-apiserver.yaml", readTestdata(t, "kube-apiserver.yaml"))
	write(".kube-apiserver.yaml.swp", []byte("garbage"))
	write("broken.yaml", []byte("apiVersion: v1\nkind: Pod\nmetadata: {}\n"))
	write("dup.yaml", readTestdata(t, "etcd.yaml"))
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o700); err != nil {
		t.Fatal(err)
	}
	pods, bad, err := ReadStaticPods(dir, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.FullName())
	}
	// dup.yaml sorts before etcd.yaml, so etcd.yaml is the duplicate.
	if strings.Join(names, " ") != "kube-system/etcd-host-a kube-system/kube-apiserver-host-a" {
		t.Errorf("pods = %v", names)
	}
	if len(bad) != 2 || bad[filepath.Join(dir, "broken.yaml")] == nil || bad[filepath.Join(dir, "etcd.yaml")] == nil {
		t.Errorf("bad = %v, want broken.yaml and the duplicate etcd.yaml", bad)
	}
	if pods, bad, err := ReadStaticPods(filepath.Join(dir, "missing"), "host-a"); err != nil || len(pods)+len(bad) != 0 {
		t.Errorf("missing dir: %v %v %v", pods, bad, err)
	}
}
