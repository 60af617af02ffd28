package kubeadm

import (
	"slices"
	"strings"
	"testing"
)

func TestMissingSANs(t *testing.T) {
	t.Parallel()
	sans := []string{"kubernetes", "cp1", "10.96.0.1", "198.18.1.1", "API.example.com"}
	tests := []struct {
		name  string
		hosts []string
		want  []string
	}{
		{"all named", []string{"198.18.1.1", "cp1"}, nil},
		{"an IP in another spelling", []string{"::ffff:198.18.1.1"}, nil},
		{"DNS names are case-insensitive", []string{"api.example.com"}, nil},
		{"missing", []string{"198.18.1.100", "cp1", "vip.example.com"}, []string{"198.18.1.100", "vip.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := MissingSANs(sans, tt.hosts...); !slices.Equal(got, tt.want) {
				t.Errorf("MissingSANs(%v) = %v, want %v", tt.hosts, got, tt.want)
			}
		})
	}
}

// TestReissueConfig: the reissue runs with the cluster's own
// ClusterConfiguration (no controlPlaneEndpoint invented when it has
// none), certSANs gaining the extra names once, and the master's own
// advertise address and node name.
func TestReissueConfig(t *testing.T) {
	t.Parallel()
	const cc = "apiServer: {}\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.33.13\nnetworking:\n  dnsDomain: cluster.local\n  serviceSubnet: 10.96.0.0/12\n"
	tests := []struct {
		name, cc string
		extra    []string
		want     []string
		notWant  []string
	}{
		{"single master", cc, []string{"198.18.1.100"}, []string{"kind: InitConfiguration", "advertiseAddress: 198.18.1.1", "name: cp1", "- 198.18.1.100", "serviceSubnet: 10.96.0.0/12", "kind: ClusterConfiguration"}, []string{"controlPlaneEndpoint"}},
		{"names kept once", strings.Replace(cc, "apiServer: {}", "apiServer:\n  certSANs:\n  - old.example.com", 1), []string{"old.example.com", "198.18.1.100"}, []string{"- old.example.com", "- 198.18.1.100"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := ReissueConfig([]byte(tt.cc), "cp1", "198.18.1.1", tt.extra)
			if err != nil {
				t.Fatal(err)
			}
			s := string(out)
			for _, w := range tt.want {
				if strings.Count(s, w) != 1 {
					t.Errorf("want %q once in\n%s", w, s)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(s, w) {
					t.Errorf("%q in\n%s", w, s)
				}
			}
		})
	}
	if _, err := ReissueConfig([]byte("kind: InitConfiguration\n"), "cp1", "198.18.1.1", nil); err == nil {
		t.Error("a document that is no ClusterConfiguration was accepted")
	}
}

// TestConversionLeft: what a resumed conversion still has to do on one
// master, from what it reads there.
func TestConversionLeft(t *testing.T) {
	t.Parallel()
	const (
		local = "https://198.18.1.1:6443"
		ep    = "198.18.1.100:8443"
		epURL = "https://" + ep
	)
	fresh := MasterState{Local: local, SANs: []string{"cp1", "kubernetes", "10.96.0.1", "198.18.1.1"},
		Servers: map[string]string{"admin.conf": local, "super-admin.conf": local, "kubelet.conf": local}}
	withSAN := fresh
	withSAN.SANs = append(slices.Clone(fresh.SANs), "198.18.1.100")
	pointed := withSAN
	pointed.Servers = map[string]string{"admin.conf": epURL, "super-admin.conf": epURL, "kubelet.conf": local}
	joined := pointed // a master that joined on the old endpoint: no super-admin.conf, kubelet.conf on it
	joined.Servers = map[string]string{"admin.conf": "https://old.example.com:6443", "kubelet.conf": "https://old.example.com:6443"}
	loopback := pointed
	loopback.Servers = map[string]string{"admin.conf": epURL, "kubelet.conf": "https://127.0.0.1:6443"}
	tests := []struct {
		name     string
		s        MasterState
		endpoint string
		want     Left
	}{
		{"nothing done", fresh, ep, Left{SANs: []string{"198.18.1.100"}, Kubeconfigs: []string{"admin.conf", "super-admin.conf"}}},
		{"certificate reissued", withSAN, ep, Left{Kubeconfigs: []string{"admin.conf", "super-admin.conf"}}},
		{"all done", pointed, ep, Left{}},
		{"kubelet.conf on the old endpoint moves", joined, ep, Left{Kubeconfigs: []string{"admin.conf", "kubelet.conf"}}},
		{"kubelet.conf on the loopback stays", loopback, ep, Left{}},
		{"an endpoint without a port is the bind port", pointed, "198.18.1.100", Left{Kubeconfigs: []string{"admin.conf", "super-admin.conf"}}},
		{"a DNS name", pointed, "api.example.com:8443", Left{SANs: []string{"api.example.com"}, Kubeconfigs: []string{"admin.conf", "super-admin.conf"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ConversionLeft(tt.s, tt.endpoint)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.SANs, tt.want.SANs) || !slices.Equal(got.Kubeconfigs, tt.want.Kubeconfigs) || got.Done() != tt.want.Done() {
				t.Errorf("ConversionLeft = %+v (done %v), want %+v", got, got.Done(), tt.want)
			}
		})
	}
	if _, err := ConversionLeft(fresh, "host:port"); err == nil {
		t.Error("an endpoint with a bad port was accepted")
	}
}

func TestKubeconfigMoves(t *testing.T) {
	t.Parallel()
	const local, ep = "https://198.18.1.1:6443", "https://198.18.1.100:8443"
	tests := []struct {
		name, file, server string
		want               bool
	}{
		{"admin.conf on the master's address", "admin.conf", local, true},
		{"admin.conf there already", "admin.conf", ep, false},
		{"super-admin.conf", "super-admin.conf", local, true},
		{"kubelet.conf on the local apiserver", "kubelet.conf", local, false},
		{"kubelet.conf on localhost", "kubelet.conf", "https://localhost:6443", false},
		{"kubelet.conf on the old endpoint", "kubelet.conf", "https://198.18.1.50:6443", true},
		{"controller-manager.conf is never moved", "controller-manager.conf", local, false},
		{"scheduler.conf is never moved", "scheduler.conf", "https://198.18.1.50:6443", false},
	}
	for _, tt := range tests {
		if got := KubeconfigMoves(tt.file, tt.server, local, ep); got != tt.want {
			t.Errorf("%s: KubeconfigMoves(%s, %s) = %v, want %v", tt.name, tt.file, tt.server, got, tt.want)
		}
	}
}
