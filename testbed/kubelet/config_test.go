package kubelet

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/hamaster/hamaster/errkind"
)

func TestParseConfigKubeadm(t *testing.T) {
	data, err := os.ReadFile("testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if c.StaticPodPath != "/etc/kubernetes/manifests" || c.HealthzAddr() != "127.0.0.1:10248" || !c.RotateCertificates {
		t.Errorf("config = %+v, healthz %s", c, c.HealthzAddr())
	}
	if c.FileCheckFrequency.Duration != time.Second || c.NodeStatusUpdateFrequency.Duration != 10*time.Second || c.NodeLeaseDurationSeconds != 40 || c.PodLogsDir != "/var/log/pods" {
		t.Errorf("defaults not applied: %+v", c)
	}
}

func TestParseConfig(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	tests := []struct {
		name, yaml string
		healthz    string
		wantErr    bool
	}{
		{name: "defaults", yaml: head, healthz: "127.0.0.1:10248"},
		{name: "healthz moved", yaml: head + "healthzPort: 20248\nhealthzBindAddress: 127.0.0.5\n", healthz: "127.0.0.5:20248"},
		{name: "healthz off", yaml: head + "healthzPort: 0\n", healthz: ""},
		{name: "wrong kind", yaml: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", wantErr: true},
		{name: "bad bind address", yaml: head + "healthzBindAddress: localhost\n", wantErr: true},
		{name: "not yaml", yaml: "{", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.yaml))
			if tc.wantErr {
				if !errors.Is(err, errkind.InvalidArgument) {
					t.Fatalf("ParseConfig = %v, want InvalidArgument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.HealthzAddr() != tc.healthz {
				t.Errorf("HealthzAddr = %q, want %q", c.HealthzAddr(), tc.healthz)
			}
		})
	}
}
