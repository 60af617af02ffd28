//go:build metallab

package kubeadm_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

// The certificates of a kubeadm-built master renewed with kubeadm's own
// tool (RenewCerts): every certificate kubeadm manages reissued, the
// apiserver, controller-manager and scheduler restarted on them, etcd
// left running (it reloads its certificates by itself); a manifest an
// interrupted run left out put back by the next; RollbackMaster restores
// the certificates the master had before.
func TestRenewCertsKubeadmMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// curl: the restart's probes of each component's health port.
	lab, p, runOn := kubeadmHosts(ctx, t, metallabtest.KubeadmOptions(t, 1, labVersion), "curl")
	h1 := lab.Hosts[0]
	run := func(cmd string) string { t.Helper(); return runOn(h1.Name, cmd) }
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: labVersion}); err != nil {
		t.Fatal(err)
	}
	f := labFlavor(t, lab, p)
	r1 := providers.Replica{Name: h1.Name, Address: h1.Addr.String()}

	// serials are the serial numbers of a certificate file and of the
	// client certificate embedded in a kubeconfig.
	serial := func(path string) string {
		t.Helper()
		b := []byte(run("cat " + path))
		if strings.HasSuffix(path, ".conf") {
			if !strings.Contains(string(b), "client-certificate-data: ") {
				t.Fatalf("%s: no client-certificate-data", path)
			}
			b = []byte(run("sed -n 's/^ *client-certificate-data: //p' " + path + " | base64 -d"))
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM", path)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return c.SerialNumber.String()
	}
	files := []string{"/etc/kubernetes/pki/apiserver.crt", "/etc/kubernetes/pki/apiserver-etcd-client.crt", "/etc/kubernetes/pki/etcd/server.crt", "/etc/kubernetes/controller-manager.conf", "/etc/kubernetes/scheduler.conf"}
	serials := func() map[string]string {
		m := map[string]string{}
		for _, f := range files {
			m[f] = serial(f)
		}
		return m
	}
	pids := func() map[string]string {
		m := map[string]string{}
		// By the port each listens on (the stand-in kubelet runs etcd as
		// its own etcd subcommand; comm names are cut at 15 characters).
		for c, port := range map[string]string{"etcd": "2379", "kube-apiserver": "6443", "kube-controller-manager": "10257", "kube-scheduler": "10259"} {
			m[c] = run("ss -Htlnp 'sport = :" + port + "' | grep -o 'pid=[0-9]*' | sort -u | tr '\\n' ' '")
		}
		return m
	}

	// Fresh certificates expire in a year: none within 30 days, every
	// certificate kubeadm renews within 10 years, never a CA.
	if names, err := f.ExpiringCerts(ctx, r1, 30*24*time.Hour); err != nil || len(names) != 0 {
		t.Fatalf("ExpiringCerts(30d) on a fresh master = %v, %v; want none", names, err)
	}
	names, err := f.ExpiringCerts(ctx, r1, 10*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"apiserver", "apiserver-etcd-client", "etcd-server", "controller-manager.conf", "admin.conf"} {
		if !slices.Contains(names, want) {
			t.Errorf("ExpiringCerts(10y) = %v; want %s among them", names, want)
		}
	}
	if slices.Contains(names, "ca") || slices.Contains(names, "etcd-ca") {
		t.Errorf("ExpiringCerts(10y) = %v names a CA (kubeadm renews none)", names)
	}

	before, pidsBefore := serials(), pids()
	start := time.Now()
	if err := f.RenewCerts(ctx, r1); err != nil {
		t.Fatalf("RenewCerts: %v", err)
	}
	t.Logf("RenewCerts took %v", time.Since(start).Round(100*time.Millisecond))
	after, pidsAfter := serials(), pids()
	for _, file := range files {
		if after[file] == before[file] {
			t.Errorf("%s: serial %s unchanged by RenewCerts", file, after[file])
		}
	}
	for c, pid := range pidsBefore {
		switch {
		case pid == "" || pidsAfter[c] == "":
			t.Errorf("%s not running: before %q, after %q", c, pid, pidsAfter[c])
		case c == "etcd" && pidsAfter[c] != pid:
			t.Errorf("etcd restarted (%s → %s): it reloads its certificates itself", pid, pidsAfter[c])
		case c != "etcd" && pidsAfter[c] == pid:
			t.Errorf("%s not restarted on its renewed certificates (pid %s)", c, pid)
		}
	}

	// A run interrupted with the scheduler's manifest moved out: the next
	// puts it back first.
	run("mkdir -p " + kubeadm.RestartDir + " && mv " + kubeadm.ManifestsDir + "/kube-scheduler.yaml " + kubeadm.RestartDir + "/")
	if err := f.RenewCerts(ctx, r1); err != nil {
		t.Fatalf("RenewCerts after an interrupted run: %v", err)
	}
	if out := run("ls " + kubeadm.ManifestsDir + " && ls -A " + kubeadm.RestartDir); !strings.Contains(out, "kube-scheduler.yaml") {
		t.Errorf("kube-scheduler.yaml not back in %s: %s", kubeadm.ManifestsDir, out)
	}
	if pids()["kube-scheduler"] == "" {
		t.Error("kube-scheduler not running after the re-run")
	}

	// The backup is the certificates from before the first renewal: the
	// rollback puts them back and the master serves on them.
	if err := f.RollbackMaster(ctx, r1, false); err != nil {
		t.Fatalf("RollbackMaster after RenewCerts: %v", err)
	}
	if restored := serials(); !maps.Equal(restored, before) {
		t.Errorf("after RollbackMaster: serials %v; want those from before the renewal %v", restored, before)
	}
	if v, err := f.RunningVersion(ctx, h1.Name); err != nil || v != labVersion {
		t.Errorf("after RollbackMaster: running %q, %v", v, err)
	}

	// Renewed again and finished: no backup, no restart directory left.
	if err := f.RenewCerts(ctx, r1); err != nil {
		t.Fatalf("RenewCerts again: %v", err)
	}
	if err := f.FinishUpgrade(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if out := run("ls -A /var/lib/hamaster"); strings.Contains(out, "upgrade-backup") || strings.Contains(out, "restart-manifests") {
		t.Errorf("left on the master after FinishUpgrade: %s", out)
	}
	if names, err := f.ExpiringCerts(ctx, r1, 30*24*time.Hour); err != nil || len(names) != 0 {
		t.Errorf("ExpiringCerts(30d) after the renewal = %v, %v; want none", names, err)
	}
}
