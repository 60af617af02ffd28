package kubeadm

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAddonRestore: the saved object goes back less what the apiserver
// and the controllers set; an object that matches it already (whatever
// its resourceVersion, status or revision) is left alone; one that is
// gone is put back.
func TestAddonRestore(t *testing.T) {
	t.Parallel()
	ds := func(image, rv, revision string) string {
		return `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"kube-proxy","namespace":"kube-system","resourceVersion":"` + rv + `","uid":"u1","generation":3,"creationTimestamp":"2026-11-29T00:00:00Z",` +
			`"managedFields":[{"manager":"kubeadm"}],"labels":{"k8s-app":"kube-proxy"},"annotations":{"deprecated.daemonset.template.generation":"` + revision + `"}},` +
			`"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy","image":"registry.k8s.io/kube-proxy:` + image + `"}]}}},"status":{"numberReady":1}}`
	}
	saved := ds("v1.33.13", "100", "1")
	tests := []struct {
		name, current string
		wantSame      bool
	}{
		{"upgraded by kubeadm's addon phase", ds("v1.34.4", "250", "2"), false},
		{"as saved, read again later", ds("v1.33.13", "300", "3"), true},
		{"gone", "", false},
	}
	for _, tt := range tests {
		want, same, err := AddonRestore([]byte(saved), []byte(tt.current))
		if err != nil || same != tt.wantSame {
			t.Fatalf("%s: same %v, %v; want %v", tt.name, same, err, tt.wantSame)
		}
		if same {
			continue
		}
		var o map[string]any
		if err := json.Unmarshal(want, &o); err != nil {
			t.Fatal(err)
		}
		md := o["metadata"].(map[string]any)
		for _, k := range []string{"resourceVersion", "uid", "generation", "creationTimestamp", "managedFields", "annotations"} {
			if _, ok := md[k]; ok {
				t.Errorf("%s: metadata.%s is put back: %s", tt.name, k, want)
			}
		}
		if _, ok := o["status"]; ok || !strings.Contains(string(want), "kube-proxy:v1.33.13") || md["labels"] == nil {
			t.Errorf("%s: want the saved spec and labels without status: %s", tt.name, want)
		}
	}
	for _, bad := range []string{"{", `{"data":{}}`} {
		if _, _, err := AddonRestore([]byte(bad), nil); err == nil {
			t.Errorf("AddonRestore(%q) took it", bad)
		}
	}
}

// TestAddonsRead runs the read of restoreAddons with sh against a backup
// directory and a kubectl stand-in: two lines an object, the saved one
// and the current one, base64, empty for none (an object not saved is not
// read); a kubectl that fails fails the read, and a backup without
// addons does not call it.
func TestAddonsRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	backup := filepath.Join(dir, "backup")
	for _, d := range []string{bin, filepath.Join(backup, "addons")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Saved: kube-proxy's DaemonSet, and an empty file for CoreDNS's
	// ConfigMap (the cluster had none).
	write := func(p, s string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(backup, "addons", "daemonset-kube-proxy.json"), `{"saved":1}`, 0o600)
	write(filepath.Join(backup, "addons", "configmap-coredns.json"), "", 0o600)
	// kubectl: the object is its 6th argument (--kubeconfig F -n kube-system get O).
	write(filepath.Join(bin, "kubectl"), `#!/bin/sh
[ -e "$0.fail" ] && { echo "connection refused" >&2; exit 1; }
case "$6" in daemonset/kube-proxy) echo '{"current":1}';; deployment/coredns) echo '{"dns":1}';; esac
`, 0o755)
	read := func() ([]string, error) {
		cmd := exec.Command("sh", "-c", addonsRead, "addons", backup)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"), err
	}
	lines, err := read()
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	// CoreDNS's Deployment is not read: the backup does not hold it.
	want := []string{b64(`{"saved":1}`), b64(`{"current":1}`), "", "", "", "", "", ""}
	if !slices.Equal(lines, want) {
		t.Errorf("lines %q, want %q", lines, want)
	}
	write(filepath.Join(bin, "kubectl.fail"), "", 0o600)
	if _, err := read(); err == nil {
		t.Error("a kubectl that fails does not fail the read")
	}
	// A backup without addons (a certificate renewal's) asks no API.
	if err := os.RemoveAll(filepath.Join(backup, "addons")); err != nil {
		t.Fatal(err)
	}
	if lines, err := read(); err != nil || strings.Join(lines, "") != "" || len(lines) != 8 {
		t.Errorf("a backup without addons: %q, %v; want 8 empty lines and no kubectl", lines, err)
	}
}
