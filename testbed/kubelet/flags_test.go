package kubelet

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hamaster/hamaster/errkind"
)

func TestParseFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    Options
		wantErr bool
	}{{
		// kubeadm's unit: the kubelet flags, then kubeadm-flags.env's.
		name: "kubeadm unit and kubeadm-flags.env",
		args: []string{
			"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
			"--config=/var/lib/kubelet/config.yaml",
			"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock", "--pod-infra-container-image=registry.k8s.io/pause:3.10",
			"--hostname-override=Host-A", "--node-ip=10.0.0.2", "--hamaster-version=v1.33.13",
		},
		env: map[string]string{EnvBinDir: "/bins"},
		want: Options{
			BootstrapKubeconfig: "/etc/kubernetes/bootstrap-kubelet.conf", Kubeconfig: "/etc/kubernetes/kubelet.conf",
			Config: "/var/lib/kubelet/config.yaml", HostnameOverride: "Host-A", NodeIP: "10.0.0.2",
			RootDir: "/var/lib/kubelet", CertDir: "/var/lib/kubelet/pki", Version: "v1.33.13", BinDir: "/bins",
			RuntimeEndpoint: "/var/run/containerd/containerd.sock",
			Ignored:         []string{"--pod-infra-container-image=registry.k8s.io/pause:3.10"},
		},
	}, {
		name: "separate values, unknown bool flag, labels, env version",
		args: []string{"--kubeconfig", "/k.conf", "--fail-swap-on", "--v", "2", "--root-dir", "/rd", "--node-labels=a=b,c=", "--version"},
		env:  map[string]string{EnvVersion: "v1.34.4"},
		want: Options{
			Kubeconfig: "/k.conf", RootDir: "/rd", CertDir: "/rd/pki", Version: "v1.34.4", ShowVersion: true,
			NodeLabels: map[string]string{"a": "b", "c": ""},
			Ignored:    []string{"--fail-swap-on", "--v 2"},
		},
	}, {
		name: "cert dir", args: []string{"--cert-dir=/pki", "--version=false"},
		want: Options{RootDir: "/var/lib/kubelet", CertDir: "/pki"},
	},
		{name: "positional argument", args: []string{"run"}, wantErr: true},
		{name: "known flag without value", args: []string{"--config"}, wantErr: true},
		{name: "bad bool", args: []string{"--version=maybe"}, wantErr: true},
		{name: "bad version", args: []string{"--hamaster-version=1.33"}, wantErr: true},
		{name: "bad label", args: []string{"--node-labels=nolabel"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFlags(tc.args, env(tc.env))
			if tc.wantErr {
				if !errors.Is(err, errkind.InvalidArgument) {
					t.Fatalf("ParseFlags(%q) = %v, want an InvalidArgument error", tc.args, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFlags(%q): %v", tc.args, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseFlags(%q)\n got %+v\nwant %+v", tc.args, got, tc.want)
			}
		})
	}
}

func TestOptionsCheckAndNodeName(t *testing.T) {
	o := Options{Config: "/c", Kubeconfig: "/k"}
	if err := o.Check(); !errors.Is(err, errkind.InvalidArgument) {
		t.Errorf("Check without a version = %v, want InvalidArgument", err)
	}
	o.Version = "v1.33.13"
	if err := o.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
	o.HostnameOverride = " Host-A "
	if n, err := o.NodeName(); err != nil || n != "host-a" {
		t.Errorf("NodeName = %q, %v; want host-a", n, err)
	}
}

func TestVersionLine(t *testing.T) {
	if got := VersionLine("v1.34.4"); got != "Kubernetes v1.34.4" {
		t.Errorf("VersionLine = %q", got)
	}
}
