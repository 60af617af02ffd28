package kubeadm

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestSetAPIServerExtraArgs(t *testing.T) {
	t.Parallel()
	doc := fixture(t, "cluster-configuration-v1.33.13.yaml")
	out, changed, err := SetAPIServerExtraArgs(doc, []string{"--audit-log-maxage=7", "--v=2"})
	if err != nil || !changed {
		t.Fatalf("SetAPIServerExtraArgs = %v, %v", changed, err)
	}
	var c struct {
		APIServer struct {
			ExtraArgs []struct{ Name, Value string } `yaml:"extraArgs"`
		} `yaml:"apiServer"`
		KubernetesVersion string `yaml:"kubernetesVersion"`
	}
	if err := yaml.Unmarshal(out, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.APIServer.ExtraArgs) != 2 || c.APIServer.ExtraArgs[0].Name != "audit-log-maxage" || c.APIServer.ExtraArgs[0].Value != "7" || c.APIServer.ExtraArgs[1].Name != "v" {
		t.Errorf("extraArgs = %+v", c.APIServer.ExtraArgs)
	}
	if c.KubernetesVersion == "" || !strings.Contains(string(out), "imageRepository: registry.k8s.io") {
		t.Errorf("other fields lost:\n%s", out)
	}
	// Idempotent; a changed value replaces the old one.
	if again, changed, err := SetAPIServerExtraArgs(out, []string{"--v=2"}); err != nil || changed || string(again) != string(out) {
		t.Errorf("again: changed=%v err=%v", changed, err)
	}
	moved, changed, err := SetAPIServerExtraArgs(out, []string{"--v=4"})
	if err != nil || !changed || strings.Count(string(moved), "name: v\n") != 1 || !strings.Contains(string(moved), `value: "4"`) {
		t.Errorf("--v=4: changed=%v err=%v\n%s", changed, err, moved)
	}
	// v1beta3 keeps extraArgs as a map.
	b3 := "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nkubernetesVersion: v1.30.0\n"
	out3, _, err := SetAPIServerExtraArgs([]byte(b3), []string{"--v=2"})
	if err != nil || !strings.Contains(string(out3), "extraArgs:\n    v: \"2\"") {
		t.Errorf("v1beta3: %v\n%s", err, out3)
	}
	for _, bad := range []string{"v=2", "--v", "--=1"} {
		if _, _, err := SetAPIServerExtraArgs(doc, []string{bad}); err == nil {
			t.Errorf("flag %q: no error", bad)
		}
	}
}

func TestInstallCommandFor(t *testing.T) {
	t.Parallel()
	got, err := UpgradeOptions{}.InstallCommandFor("v1.34.4", "kubelet", "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/core:/stable:/v1.34/deb/", "apt-mark unhold kubelet kubectl", "apt-get install -y --allow-downgrades kubelet='1.34.4-*' kubectl='1.34.4-*'", "apt-mark hold kubelet kubectl"} {
		if !strings.Contains(got, want) {
			t.Errorf("default install command lacks %q:\n%s", want, got)
		}
	}
	lab := UpgradeOptionsFromEnv(envMap{EnvInstallCommand: "hamaster-lab-install {version} {packages}", EnvIgnorePreflightErrors: "CreateJob, Foo", EnvRestartKubeletCommand: "lab-restart kubelet"}.get)
	if got, _ := lab.InstallCommandFor("v1.33.13", "kubeadm"); got != "hamaster-lab-install v1.33.13 kubeadm" {
		t.Errorf("lab install command = %q", got)
	}
	if lab.RestartKubeletCommand != "lab-restart kubelet" {
		t.Errorf("RestartKubeletCommand = %q", lab.RestartKubeletCommand)
	}
	if strings.Join(lab.IgnorePreflightErrors, ",") != "CreateJob,Foo" {
		t.Errorf("IgnorePreflightErrors = %q", lab.IgnorePreflightErrors)
	}
	if _, err := lab.InstallCommandFor("1.34", "kubeadm"); err == nil {
		t.Error("version 1.34: no error")
	}
}

type envMap map[string]string

func (m envMap) get(k string) string { return m[k] }

func TestExitsSince(t *testing.T) {
	t.Parallel()
	dir := "/var/log/pods/kube-system_kube-apiserver-m1_"
	before := map[string]podLog{dir + "old/kube-apiserver/0.log": {size: 100, age: 5 * time.Second}, dir + "old/kube-apiserver/1.log": {size: 100}, dir + "new/kube-apiserver/1.log": {size: 10, age: time.Hour}}
	oldDir := currentDir(before)
	if oldDir != dir+"old/kube-apiserver" {
		t.Fatalf("currentDir = %q", oldDir)
	}
	for _, tc := range []struct {
		name    string
		now     map[string]podLog
		started bool
		exits   int
		last    string
	}{
		{"nothing new", before, false, 0, ""},
		{"the old one logging as it stops", map[string]podLog{dir + "old/kube-apiserver/1.log": {size: 200}}, false, 0, ""},
		{"the new pod running", map[string]podLog{dir + "new2/kube-apiserver/0.log": {size: 5}}, true, 0, ""},
		{"the new pod exited twice", map[string]podLog{dir + "new2/kube-apiserver/0.log": {size: 5}, dir + "new2/kube-apiserver/1.log": {size: 5}, dir + "new2/kube-apiserver/2.log": {size: 1, age: time.Second}}, true, 2, dir + "new2/kube-apiserver/1.log"},
		{"an old restart log grown (the same manifest again)", map[string]podLog{dir + "new/kube-apiserver/1.log": {size: 20}}, true, 1, dir + "new/kube-apiserver/0.log"},
	} {
		if got := startedSince(before, tc.now, oldDir); got != tc.started {
			t.Errorf("%s: startedSince = %v", tc.name, got)
		}
		exits, last := exitsSince(before, tc.now, oldDir)
		if exits != tc.exits || last != tc.last {
			t.Errorf("%s: exitsSince = %d, %q; want %d, %q", tc.name, exits, last, tc.exits, tc.last)
		}
	}
}
