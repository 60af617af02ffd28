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
