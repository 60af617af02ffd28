package kubeadm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/flavors"
)

// TestFindPins: what still names one master's own address where kubeadm
// init --control-plane-endpoint would have named the endpoint, each with
// the command that moves it; what kubeadm itself keeps on the master's
// own apiserver (a kubelet.conf in ControlPlaneKubeletLocalMode,
// controller-manager.conf and scheduler.conf) is no pin.
func TestFindPins(t *testing.T) {
	t.Parallel()
	const ep, vip = "10.0.0.100:8443", "https://10.0.0.100:8443"
	masters := []PinMaster{{"host-1", "host-1", "10.0.0.11"}, {"host-2", "host-2", "10.0.0.12"}, {"host-3", "host-3", "10.0.0.13"}}
	h := func(n int) string { return fmt.Sprintf("https://10.0.0.1%d:6443", n) }
	// converted is a cluster the conversion finished: every consumer on
	// the VIP, kubeadm's local ones on each master's own apiserver.
	converted := func() PinInput {
		in := PinInput{Endpoint: ep, Masters: masters, ClusterInfo: vip, Servers: map[string]map[string]string{}}
		in.KubeProxy = KubeProxyState{ConfigMap: true, DaemonSet: true, Server: vip, Rolled: vip, Generation: 2, ObservedGeneration: 2, Desired: 3, Updated: 3}
		for i, m := range masters {
			in.Servers[m.Replica] = map[string]string{"admin.conf": vip, "kubelet.conf": h(i + 1), "controller-manager.conf": h(i + 1), "scheduler.conf": h(i + 1)}
		}
		in.Servers["host-1"]["super-admin.conf"] = vip
		in.Workers = map[string]string{"worker-1": vip, "worker-2": ""}
		return in
	}
	fix := EndpointFix(ep)
	type pin struct{ consumer, on, master, fix string }
	tests := []struct {
		name string
		edit func(in *PinInput)
		want []pin
	}{
		{"no endpoint: nothing to point at", func(in *PinInput) {
			in.Endpoint, in.KubeProxy.Server = "", h(1)
		}, nil},
		{"converted", nil, nil},
		{"kube-proxy's ConfigMap on host-1", func(in *PinInput) {
			in.KubeProxy.Server, in.KubeProxy.Rolled = h(1), ""
		}, []pin{{"kube-system/kube-proxy ConfigMap kubeconfig.conf", "", "host-1", fix}}},
		{"kube-proxy moved, its pods not rolled", func(in *PinInput) {
			in.KubeProxy.Pending, in.KubeProxy.Rolled = h(1), ""
		}, []pin{{"kube-system/kube-proxy pods (started before kubeconfig.conf moved; not rolled yet)", "", "host-1", fix}}},
		{"kube-proxy rolling", func(in *PinInput) {
			in.KubeProxy.Pending, in.KubeProxy.Updated = h(1), 1
		}, []pin{{"kube-system/kube-proxy pods not replaced yet (1 of 3 updated)", "", "host-1", KubeProxyRollFix}}},
		{"kube-proxy rolled: a stale mark", func(in *PinInput) {
			in.KubeProxy.Pending = h(1)
		}, nil},
		{"no kube-proxy", func(in *PinInput) {
			in.KubeProxy = KubeProxyState{}
		}, nil},
		{"cluster-info on host-2", func(in *PinInput) {
			in.ClusterInfo = h(2)
		}, []pin{{"kube-public/cluster-info kubeconfig", "", "host-2", fix}}},
		{"admin.conf on its own master and on another, super-admin.conf by Node name", func(in *PinInput) {
			in.Servers["host-1"]["admin.conf"] = h(1)
			in.Servers["host-2"]["admin.conf"] = h(1)
			in.Servers["host-1"]["super-admin.conf"] = "https://host-1:6443"
		}, []pin{
			{"/etc/kubernetes/admin.conf", "host-1", "host-1", fix},
			{"/etc/kubernetes/super-admin.conf", "host-1", "host-1", fix},
			{"/etc/kubernetes/admin.conf", "host-2", "host-1", fix},
		}},
		{"admin.conf on localhost", func(in *PinInput) {
			in.Servers["host-3"]["admin.conf"] = "https://127.0.0.1:6443"
		}, []pin{{"/etc/kubernetes/admin.conf", "host-3", "host-3", fix}}},
		{"kubelet.conf: local mode is no pin, another master is", func(in *PinInput) {
			in.Servers["host-1"]["kubelet.conf"] = "https://127.0.0.1:6443"
			in.Servers["host-3"]["kubelet.conf"] = h(1)
		}, []pin{{"/etc/kubernetes/kubelet.conf", "host-3", "host-1", fix}}},
		{"controller-manager.conf on another master: by hand", func(in *PinInput) {
			in.Servers["host-2"]["controller-manager.conf"] = h(1)
		}, []pin{{"/etc/kubernetes/controller-manager.conf", "host-2", "host-1", "by hand (hamaster does not move it): on host-2 set its server to the master's own apiserver https://10.0.0.12:6443, as kubeadm renders it, and restart the component (its manifest out of /etc/kubernetes/manifests and back)"}}},
		{"the endpoint is host-1's own address", func(in *PinInput) {
			in.Endpoint, in.MoveTo = "10.0.0.11:6443", ep
			in.ClusterInfo, in.KubeProxy.Server, in.KubeProxy.Rolled = h(1), h(1), h(1)
			for _, m := range masters {
				in.Servers[m.Replica]["admin.conf"] = h(1)
			}
			in.Servers["host-1"]["super-admin.conf"] = h(1)
			in.Servers["host-1"]["kubelet.conf"] = h(1) // its own apiserver
			in.Servers["host-2"]["kubelet.conf"] = h(1)
		}, []pin{
			{"kube-system/kubeadm-config controlPlaneEndpoint", "", "host-1", fix},
			{"kube-public/cluster-info kubeconfig", "", "host-1", fix},
			{"kube-system/kube-proxy ConfigMap kubeconfig.conf", "", "host-1", fix},
			{"/etc/kubernetes/admin.conf", "host-1", "host-1", fix},
			{"/etc/kubernetes/super-admin.conf", "host-1", "host-1", fix},
			{"/etc/kubernetes/admin.conf", "host-2", "host-1", fix},
			{"/etc/kubernetes/kubelet.conf", "host-2", "host-1", fix},
			{"/etc/kubernetes/admin.conf", "host-3", "host-1", fix},
		}},
		{"workers: one on host-2's address, one on an address of the operator's, one not joined", func(in *PinInput) {
			in.Workers["worker-3"] = h(2)
			in.Workers["worker-1"] = "https://lb.example.com:6443"
		}, []pin{{"/etc/kubernetes/kubelet.conf (worker)", "worker-3", "host-2", fix}}},
		{"workers by master's Node name, sorted", func(in *PinInput) {
			in.Workers["worker-9"] = "https://host-1:6443"
			in.Workers["worker-3"] = h(3)
		}, []pin{
			{"/etc/kubernetes/kubelet.conf (worker)", "worker-3", "host-3", fix},
			{"/etc/kubernetes/kubelet.conf (worker)", "worker-9", "host-1", fix},
		}},
		{"workers on a former endpoint: a pin of no master; one on another address, or on the endpoint, left alone", func(in *PinInput) {
			in.FormerEndpoints = []string{"10.0.0.99:8443", "old-lb.example.com", "10.0.0.100:8443"} // the last as recorded by an older run
			in.Workers["worker-6"] = "https://10.0.0.100:8443"
			in.Workers["worker-3"] = "https://10.0.0.99:8443"
			in.Workers["worker-4"] = "https://old-lb.example.com:6443"
			in.Workers["worker-5"] = "https://10.0.0.99:6443" // not the former endpoint's port
		}, []pin{
			{"/etc/kubernetes/kubelet.conf (worker)", "worker-3", "", fix},
			{"/etc/kubernetes/kubelet.conf (worker)", "worker-4", "", fix},
		}},
		{"the endpoint is host-1's own address, no VIP known", func(in *PinInput) {
			in.Endpoint = "10.0.0.11:6443"
			in.ClusterInfo = "https://10.0.0.11:6443"
		}, []pin{
			{"kube-system/kubeadm-config controlPlaneEndpoint", "", "host-1", "hamaster endpoint set --yes ADDRESS|NAME[:PORT] (an address in front of every apiserver: a VIP or load balancer)"},
			{"kube-public/cluster-info kubeconfig", "", "host-1", "hamaster endpoint set --yes ADDRESS|NAME[:PORT] (an address in front of every apiserver: a VIP or load balancer)"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := converted()
			if tt.edit != nil {
				tt.edit(&in)
			}
			var got []pin
			for _, p := range FindPins(in) {
				got = append(got, pin{p.Consumer, p.On, p.Master, p.Fix})
				if p.Server == "" {
					t.Errorf("pin %+v names no server", p)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("pins\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestPinsOf: what names a master, except its own files (they go with
// it), is what blocks its removal; a former endpoint's pin blocks none.
func TestPinsOf(t *testing.T) {
	t.Parallel()
	pins := []flavors.Pin{
		{Consumer: "kube-system/kube-proxy ConfigMap kubeconfig.conf", Master: "host-1"},
		{Consumer: "/etc/kubernetes/admin.conf", On: "host-1", Master: "host-1"},
		{Consumer: "/etc/kubernetes/admin.conf", On: "host-2", Master: "host-1"},
		{Consumer: "/etc/kubernetes/admin.conf", On: "host-3", Master: "host-3"},
		{Consumer: "/etc/kubernetes/kubelet.conf (worker)", On: "worker-1", Server: "https://10.0.0.99:8443"}, // a former endpoint: no master's
	}
	if got, want := pins[4].String(), "/etc/kubernetes/kubelet.conf (worker) on worker-1 names a former endpoint of the cluster (https://10.0.0.99:8443)"; got != want {
		t.Errorf("a former endpoint's pin reads %q, want %q", got, want)
	}
	var got []string
	for _, p := range flavors.PinsOf(pins, "host-1") {
		got = append(got, p.String())
	}
	want := []string{"kube-system/kube-proxy ConfigMap kubeconfig.conf names host-1's own address ()", "/etc/kubernetes/admin.conf on host-2 names host-1's own address ()"}
	if !slices.Equal(got, want) {
		t.Errorf("PinsOf(host-1)\n got %q\nwant %q", got, want)
	}
	if ps := flavors.PinsOf(pins, "host-2"); len(ps) != 0 {
		t.Errorf("PinsOf(host-2) = %v", ps)
	}
}

// TestParseKubeconfigServers reads the per-master script's lines, quotes
// and unknown names dropped.
func TestParseKubeconfigServers(t *testing.T) {
	t.Parallel()
	out := "admin.conf https://10.0.0.100:8443\nkubelet.conf \"https://127.0.0.1:6443\"\nother.conf https://x:1\nscheduler.conf https://10.0.0.11:6443\n\n"
	got := ParseKubeconfigServers([]byte(out))
	want := map[string]string{"admin.conf": "https://10.0.0.100:8443", "kubelet.conf": "https://127.0.0.1:6443", "scheduler.conf": "https://10.0.0.11:6443"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ParseKubeconfigServers = %v; want %v", got, want)
	}
	if !strings.Contains(kubeconfigServers, "sed -n") || strings.Contains(kubeconfigServers, "cat ") {
		t.Error("the script must read only the server lines, never a whole kubeconfig (its keys)")
	}
}

// TestWorkerFixByHand runs the sed of the command an operator is given
// for a worker hamaster cannot reach on a kubelet.conf as kubeadm join
// writes it: the server moves, nothing else changes.
func TestWorkerFixByHand(t *testing.T) {
	t.Parallel()
	const before = `apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTg==
    server: https://10.0.0.11:6443
  name: default-cluster
contexts:
- context:
    cluster: default-cluster
    namespace: default
    user: default-auth
  name: default-context
current-context: default-context
kind: Config
users:
- name: default-auth
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
`
	const vip = "https://10.0.0.100:8443"
	cmd := WorkerFixByHand("worker-1", vip)
	sedCmd, restart, ok := strings.Cut(strings.TrimPrefix(cmd, "on worker-1: "), " && ")
	if !ok || restart != "systemctl restart kubelet" || !strings.HasPrefix(cmd, "on worker-1: ") {
		t.Fatalf("command %q: want 'on worker-1: sed … && systemctl restart kubelet'", cmd)
	}
	file := filepath.Join(t.TempDir(), "kubelet.conf")
	if err := os.WriteFile(file, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	sedCmd = strings.Replace(sedCmd, WorkerKubeconfig, file, 1)
	if out, err := exec.Command("sh", "-c", sedCmd).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", sedCmd, err, out)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(before, "https://10.0.0.11:6443", vip, 1); string(got) != want {
		t.Errorf("after the sed:\n%s\nwant:\n%s", got, want)
	}
	if srv, err := KubeconfigServer(got); err != nil || srv != vip {
		t.Errorf("KubeconfigServer = %q, %v; want %s", srv, err, vip)
	}
}
