package kubeadm

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestFormerEndpointsAfter(t *testing.T) {
	t.Parallel()
	many := "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1"
	tests := []struct {
		name, list, old, now, want string
	}{
		{"first conversion: none before", "", "", "10.0.0.100:8443", ""},
		{"moved: the old one recorded", "", "10.0.0.100:8443", "lb.example.com:6443", "10.0.0.100:8443"},
		{"the same again: nothing", "10.0.0.100:8443", "lb.example.com:6443", "lb.example.com:6443", "10.0.0.100:8443"},
		{"moved back: the new one is no former one", "10.0.0.100:8443", "lb.example.com:6443", "10.0.0.100:8443", "lb.example.com:6443"},
		{"no endpoint twice, IPs compared as IPs", "10.0.0.100:8443, ::1:1", "10.0.0.100:8443", "x:1", "10.0.0.100:8443,::1:1"},
		{"the oldest dropped past the bound", many, "i:1", "j:1", "b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1"},
		{"a host alone is the host on kubeadm's bind port", "", "k8s.example.com", "k8s.example.com:6443", ""},
		{"another port is another endpoint", "", "k8s.example.com", "k8s.example.com:8443", "k8s.example.com"},
	}
	for _, tt := range tests {
		if got := FormerEndpointsAfter(tt.list, tt.old, tt.now); got != tt.want {
			t.Errorf("%s: FormerEndpointsAfter(%q, %q, %q) = %q, want %q", tt.name, tt.list, tt.old, tt.now, got, tt.want)
		}
	}
}

func TestFormerNamed(t *testing.T) {
	t.Parallel()
	formers := []string{"10.0.0.100:8443", "old.example.com", "[fd00::1]:6443"}
	tests := []struct{ server, want string }{
		{"https://10.0.0.100:8443", "10.0.0.100:8443"},
		{"https://10.0.0.100:6443", ""},
		{"https://OLD.example.com:6443", "old.example.com"},
		{"https://old.example.com", ""}, // 443, not kubeadm's bind port
		{"https://old.example.com:8443", ""},
		{"https://[fd00:0::1]:6443", "[fd00::1]:6443"},
		{"https://10.0.0.11:6443", ""},
		{"", ""},
		{"not a url", ""},
	}
	for _, tt := range tests {
		if got := formerNamed(formers, tt.server); got != tt.want {
			t.Errorf("formerNamed(%q) = %q, want %q", tt.server, got, tt.want)
		}
	}
}

// TestEditKubeadmConfigEndpoint: the endpoint and its certSANs move with
// the former endpoint recorded, in one object; the same endpoint again
// changes nothing.
func TestEditKubeadmConfigEndpoint(t *testing.T) {
	t.Parallel()
	cm := map[string]any{
		"metadata": map[string]any{"name": "kubeadm-config", "resourceVersion": "7"},
		"data":     map[string]any{"ClusterConfiguration": string(fixture(t, "cluster-configuration-v1.33.13.yaml"))},
	}
	steps := []struct {
		endpoint    string
		wantChanged bool
		wantFormer  string
		wantSANs    []string
	}{
		{"10.0.0.100:8443", true, "", []string{"10.0.0.100"}},
		{"10.0.0.100:8443", false, "", []string{"10.0.0.100"}},
		{"lb.example.com:6443", true, "10.0.0.100:8443", []string{"10.0.0.100", "lb.example.com"}},
		{"lb.example.com:6443", false, "10.0.0.100:8443", []string{"10.0.0.100", "lb.example.com"}},
		{"10.0.0.100:8443", true, "lb.example.com:6443", []string{"10.0.0.100", "lb.example.com"}},
	}
	for i, st := range steps {
		changed, err := EditKubeadmConfigEndpoint(cm, st.endpoint)
		if err != nil || changed != st.wantChanged {
			t.Fatalf("step %d (%s): changed %v, %v; want %v", i, st.endpoint, changed, err, st.wantChanged)
		}
		former, _ := annotations(cm, false)[AnnotationFormerEndpoints].(string)
		if former != st.wantFormer {
			t.Errorf("step %d (%s): %s = %q, want %q", i, st.endpoint, AnnotationFormerEndpoints, former, st.wantFormer)
		}
		var cc struct {
			ControlPlaneEndpoint string `yaml:"controlPlaneEndpoint"`
			APIServer            struct {
				CertSANs []string `yaml:"certSANs"`
			} `yaml:"apiServer"`
		}
		if err := yaml.Unmarshal([]byte(cm["data"].(map[string]any)["ClusterConfiguration"].(string)), &cc); err != nil {
			t.Fatal(err)
		}
		if cc.ControlPlaneEndpoint != st.endpoint || strings.Join(cc.APIServer.CertSANs, ",") != strings.Join(st.wantSANs, ",") {
			t.Errorf("step %d: controlPlaneEndpoint %q certSANs %v, want %q %v", i, cc.ControlPlaneEndpoint, cc.APIServer.CertSANs, st.endpoint, st.wantSANs)
		}
	}
	if _, err := EditKubeadmConfigEndpoint(map[string]any{"data": map[string]any{}}, "x:1"); err == nil || !strings.Contains(err.Error(), "no ClusterConfiguration") {
		t.Errorf("a kubeadm-config without ClusterConfiguration: %v", err)
	}
}
