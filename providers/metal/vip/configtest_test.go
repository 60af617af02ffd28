package vip

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The rendered keepalived.conf and haproxy.cfg pass the real daemons' own
// checks, at the versions the lab and the walk run (Debian bookworm's
// keepalived 2.2.7 and HAProxy 2.6, which scripts/test-prereqs.sh
// installs): `keepalived --config-test` reports every keyword it does not
// know (as 2.0.20 does track_file and check_unicast_src, both 2.1.0's)
// and exits 5; `haproxy -c` parses the whole configuration. Paths under
// ConfigDir and RunDir are moved into a temporary directory holding the
// scripts keepalived checks for.
func TestRenderedConfigsPassTheDaemonsChecks(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"/usr/sbin/keepalived", "/usr/sbin/haproxy"} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s: %v (make test's scripts/test-prereqs.sh installs keepalived and haproxy)", bin, err)
		}
	}
	for _, c := range []struct {
		name string
		cfg  func() Config
	}{
		{"three masters", testConfig},
		{"one master and a drained peer", func() Config {
			c := testConfig()
			c.Masters = c.Masters[1:2]
			c.Drained = []string{"cp-2"}
			return c
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f, err := Render(c.cfg())
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			local := strings.NewReplacer(ConfigDir, dir, RunDir, dir)
			write := func(name string, data []byte, mode os.FileMode) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte(local.Replace(string(data))), mode); err != nil {
					t.Fatal(err)
				}
				return p
			}
			write(filepath.Base(f.CheckScript.Path), f.CheckScript.Data, 0o755)
			write(filepath.Base(f.NotifyScript.Path), f.NotifyScript.Data, 0o755)
			conf := write("keepalived.conf", f.KeepalivedConf.Data, 0o644)
			log := filepath.Join(dir, "config-test.log")
			out, err := exec.CommandContext(t.Context(), "/usr/sbin/keepalived", "--config-test="+log, "-f", conf).CombinedOutput()
			logged, _ := os.ReadFile(log)
			if err != nil || len(strings.TrimSpace(string(logged))) > 0 {
				t.Errorf("keepalived --config-test: %v\n%s%s\n%s", err, out, logged, f.KeepalivedConf.Data)
			}
			cfg := write("haproxy.cfg", f.HAProxyCfg.Data, 0o644)
			if out, err := exec.CommandContext(t.Context(), "/usr/sbin/haproxy", "-c", "-f", cfg).CombinedOutput(); err != nil {
				t.Errorf("haproxy -c: %v\n%s\n%s", err, out, f.HAProxyCfg.Data)
			}
		})
	}
}
