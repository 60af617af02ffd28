package vip

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
)

func testConfig() Config {
	return Config{
		VIP: "192.0.2.100", Interface: "eth0", Priority: 150, Host: "cp-2",
		Masters: []Master{{"cp-1", "192.0.2.11"}, {"cp-2", "192.0.2.12"}, {"cp-3", "192.0.2.13"}},
		Drained: []string{"cp-3"},
	}
}

func mustContain(t *testing.T, what string, got []byte, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(string(got), w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// The files carry what the design requires (docs/metal.md "The VIP").
func TestRender(t *testing.T) {
	t.Parallel()
	f, err := Render(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "keepalived.conf", f.KeepalivedConf.Data,
		"script \""+CheckScriptPath+"\"", "interval 1\n", "fall 2\n", "rise 2\n", "weight 0\n",
		"file \""+MaintenancePath+"\"", "state BACKUP\n", "nopreempt\n", "interface eth0\n",
		"virtual_router_id 51\n", "priority 150\n", "version 3\n", "advert_int 0.5\n", "check_unicast_src\n",
		"unicast_src_ip 192.0.2.12\n", "        192.0.2.11\n        192.0.2.13\n",
		"192.0.2.100/32 dev eth0\n", "track_script {\n        hamaster_apiserver\n",
		"track_file {\n        hamaster_maintenance\n", "enable_script_security")
	if strings.Contains(string(f.KeepalivedConf.Data), "unicast_peer {\n        192.0.2.12") {
		t.Error("keepalived.conf lists the host itself as a peer")
	}
	mustContain(t, "check script", f.CheckScript.Data, "#!/bin/sh\n",
		"https://127.0.0.1:6443/readyz", "--insecure", "--max-time 0.4", "http://127.0.0.1:8404/healthz")
	mustContain(t, "haproxy.cfg", f.HAProxyCfg.Data,
		"mode tcp\n", "bind :8443\n", "bind 127.0.0.1:8404\n", "monitor-uri /healthz\n",
		"option httpchk GET /readyz\n", "http-check expect status 200\n",
		"default-server check check-ssl verify none inter 1s fastinter 250ms fall 2 rise 2 observe layer4 error-limit 1 on-error fastinter on-marked-down shutdown-sessions\n",
		// A new connection leaves a dead apiserver quickly (issue 33).
		"option redispatch 1\n", "retries 3\n", "timeout connect 500ms\n",
		"server cp-1 192.0.2.11:6443\n", "server cp-2 192.0.2.12:6443\n", "server cp-3 192.0.2.13:6443 weight 0\n",
		"stats socket "+HAProxySocketPath+" mode 600 level admin expose-fd listeners\n")
	if f.CheckScript.Mode != 0o755 || f.KeepalivedUnit.Mode != 0o644 {
		t.Errorf("modes: check script %v, unit %v", f.CheckScript.Mode, f.KeepalivedUnit.Mode)
	}
	if got := testConfig().Endpoint(); got != "192.0.2.100:8443" {
		t.Errorf("Endpoint = %s", got)
	}
	// The units run the commands, reload by signal, restart on exit.
	for _, u := range []struct {
		file   File
		path   string
		cmd    []string
		reload string
	}{
		{f.KeepalivedUnit, KeepalivedUnitPath, f.KeepalivedCommand, "ExecReload=/bin/kill -HUP $MAINPID\n"},
		{f.HAProxyUnit, HAProxyUnitPath, f.HAProxyCommand, "ExecReload=/bin/kill -USR2 $MAINPID\n"},
	} {
		if u.file.Path != u.path {
			t.Errorf("unit path %s, want %s", u.file.Path, u.path)
		}
		mustContain(t, u.path, u.file.Data, "[Unit]\n", "[Service]\nType=simple\n",
			"ExecStartPre=/bin/mkdir -p "+RunDir+"\n", "ExecStart="+strings.Join(u.cmd, " ")+"\n", u.reload,
			"StartLimitIntervalSec=0\n", "Restart=always\n", "RestartSec=", "[Install]\nWantedBy=multi-user.target\n")
	}
	mustContain(t, "haproxy unit", f.HAProxyUnit.Data, "KillMode=mixed\n", "RestartSec=1s\n")
	mustContain(t, "keepalived unit", f.KeepalivedUnit.Data, "RestartSec=200ms\n")
	// A keepalived killed hard leaves the VIP: its restart drops it first.
	drop := "ExecStartPre=/bin/sh -c \"ip -4 addr del 192.0.2.100/32 dev eth0 2>/dev/null; exit 0\"\n"
	mustContain(t, "keepalived unit", f.KeepalivedUnit.Data, drop)
	if strings.Contains(string(f.HAProxyUnit.Data), "addr del") {
		t.Errorf("haproxy's unit deletes an address:\n%s", f.HAProxyUnit.Data)
	}
	mustContain(t, "keepalived command", []byte(strings.Join(f.KeepalivedCommand, " ")),
		DefaultKeepalivedPath+" --dont-fork --log-console", "--use-file="+KeepalivedConfPath, "--pid="+KeepalivedPidPath)
	mustContain(t, "haproxy command", []byte(strings.Join(f.HAProxyCommand, " ")), DefaultHAProxyPath+" -W -db -f "+HAProxyCfgPath)
}

// The rendered configurations pass the daemons' own checks when the
// daemons are installed (Debian's keepalived 2.2 and haproxy 2.6).
func TestRenderedConfigsParse(t *testing.T) {
	t.Parallel()
	f, err := Render(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		bin  string
		data []byte
		args func(string) []string
	}{
		{"haproxy", f.HAProxyCfg.Data, func(p string) []string { return []string{"-c", "-q", "-f", p} }},
		// The check script is not installed here: a stand-in that exists.
		{"keepalived", []byte(strings.Replace(string(f.KeepalivedConf.Data), CheckScriptPath, "/bin/true", 1)), func(p string) []string { return []string{"--config-test", "--use-file=" + p} }},
	} {
		bin, err := exec.LookPath(c.bin)
		if err != nil {
			if _, err = exec.LookPath("/usr/sbin/" + c.bin); err != nil {
				t.Logf("%s not installed: its parse check skipped", c.bin)
				continue
			}
			bin = "/usr/sbin/" + c.bin
		}
		p := filepath.Join(dir, c.bin+".conf")
		if err := os.WriteFile(p, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(t.Context(), bin, c.args(p)...).CombinedOutput(); err != nil {
			t.Errorf("%s refuses the rendered config: %v\n%s", c.bin, err, out)
		}
	}
}

// Bad input is refused with every problem, each naming its field.
func TestRenderRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"vip not an IP", func(c *Config) { c.VIP = "vip.example" }, []string{"vip: \"vip.example\" is not an IP address"}},
		{"vip IPv6", func(c *Config) { c.VIP = "2001:db8::1" }, []string{"vip: 2001:db8::1 is not IPv4"}},
		{"duplicate master name", func(c *Config) { c.Masters[2].Name = "cp-1" }, []string{"masters[2].name: \"cp-1\" is listed twice"}},
		{"duplicate master address", func(c *Config) { c.Masters[2].Address = "192.0.2.11" }, []string{"masters[2].address: 192.0.2.11 (cp-3) is also cp-1's"}},
		{"master is the VIP", func(c *Config) { c.Masters[0].Address = "192.0.2.100" }, []string{"masters[0].address: 192.0.2.100 (cp-1) is the VIP"}},
		{"priority 0", func(c *Config) { c.Priority = 0 }, []string{"priority: 0 is outside 1..254"}},
		{"priority 255", func(c *Config) { c.Priority = 255 }, []string{"priority: 255 is outside 1..254"}},
		{"router id", func(c *Config) { c.RouterID = 256 }, []string{"routerID: 256 is outside 1..255"}},
		{"port clash", func(c *Config) { c.FrontendPort = 6443 }, []string{"frontendPort: 6443 is the apiserver's port"}},
		{"health port clash", func(c *Config) { c.HealthPort = 8443 }, []string{"healthPort: 8443 clashes"}},
		{"port range", func(c *Config) { c.FrontendPort = 70000 }, []string{"frontendPort: 70000 is outside 1..65535"}},
		{"host not a master", func(c *Config) { c.Host = "cp-9" }, []string{"host: \"cp-9\" is not one of masters"}},
		{"drained unknown", func(c *Config) { c.Drained = []string{"cp-9"} }, []string{"drained[0]: \"cp-9\" is not one of masters"}},
		{"interface", func(c *Config) { c.Interface = "eth0; reboot" }, []string{"interface: \"eth0; reboot\""}},
		{"bad name", func(c *Config) { c.Masters[1].Name = "CP_2" }, []string{"masters[1].name: \"CP_2\" is not a DNS-1123 label"}},
		{"two problems", func(c *Config) { c.VIP = ""; c.Priority = 300 }, []string{"vip: \"\"", "priority: 300"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testConfig()
			c.Masters = append([]Master(nil), c.Masters...)
			tc.change(&c)
			_, err := Render(c)
			if !errors.Is(err, errkind.InvalidArgument) {
				t.Fatalf("Render = %v, want InvalidArgument", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	c := testConfig()
	c.Interface = ""
	if _, err := Render(c); err == nil || !strings.Contains(err.Error(), "interface not resolved") {
		t.Errorf("Render without interface = %v", err)
	}
}

// With Peers, keepalived's unicast peers are the same whichever of them
// are masters (no reload restarts the VRRP instance as masters come and
// go), and a single master is still unicast.
func TestRenderPeersStable(t *testing.T) {
	t.Parallel()
	all := []string{"192.0.2.13", "192.0.2.11", "192.0.2.12"}
	one := Config{VIP: "192.0.2.100", Interface: "eth0", Priority: 200, Host: "cp-1", Masters: []Master{{"cp-1", "192.0.2.11"}}, Peers: all}
	three := one
	three.Masters = []Master{{"cp-3", "192.0.2.13"}, {"cp-1", "192.0.2.11"}, {"cp-2", "192.0.2.12"}}
	a, err := Render(one)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(three)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.KeepalivedConf.Data) != string(b.KeepalivedConf.Data) {
		t.Errorf("keepalived.conf differs between one master and three:\n%s\n---\n%s", a.KeepalivedConf.Data, b.KeepalivedConf.Data)
	}
	mustContain(t, "keepalived.conf", a.KeepalivedConf.Data, "unicast_peer {\n        192.0.2.12\n        192.0.2.13\n    }")
	if string(a.HAProxyCfg.Data) == string(b.HAProxyCfg.Data) {
		t.Error("haproxy.cfg the same with one server and three")
	}
	bad := one
	bad.Peers = []string{"192.0.2.100", "cp-9"}
	if _, err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "peers[0]") || !strings.Contains(err.Error(), "peers[1]") {
		t.Errorf("Validate = %v", err)
	}
}
