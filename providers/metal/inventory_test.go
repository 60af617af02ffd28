package metal

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
)

const good = `# a lab
vip: 192.0.2.100
hosts:
  - name: cp-1
    address: 192.0.2.11
    role: control-plane
    zone: dc1-a
    rack: r12
  - name: cp-2
    address: 2001:db8::12
    role: control-plane
    ssh:
      user: admin
      port: 2222
  - name: w-1
    address: W-1.Lab.Example.
    role: worker
`

func TestParse(t *testing.T) {
	t.Parallel()
	inv, err := Parse(strings.NewReader(good), "good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Inventory{VIP: "192.0.2.100", Hosts: []Host{
		{Name: "cp-1", Address: "192.0.2.11", Role: RoleControlPlane, SSH: SSH{User: "root", Port: 22}, Zone: "dc1-a", Rack: "r12"},
		{Name: "cp-2", Address: "2001:db8::12", Role: RoleControlPlane, SSH: SSH{User: "admin", Port: 2222}},
		{Name: "w-1", Address: "W-1.Lab.Example.", Role: RoleWorker, SSH: SSH{User: "root", Port: 22}},
	}}
	if !reflect.DeepEqual(inv, want) {
		t.Fatalf("Parse =\n%+v\nwant\n%+v", inv, want)
	}
	if got := inv.Hosts[1].SSHAddr(); got != "[2001:db8::12]:2222" {
		t.Errorf("SSHAddr = %s", got)
	}
	if cps := inv.ControlPlaneHosts(); len(cps) != 2 || cps[0].Name != "cp-1" || cps[1].Name != "cp-2" {
		t.Errorf("ControlPlaneHosts = %+v", cps)
	}
	if h, err := inv.Host("w-1"); err != nil || h.ControlPlane() {
		t.Errorf("Host(w-1) = %+v, %v", h, err)
	}
	_, err = inv.Host("cp-9")
	if !errors.Is(err, errkind.NotFound) || !strings.Contains(err.Error(), "host cp-9 is not in the metal inventory (it lists: cp-1, cp-2, w-1)") {
		t.Errorf("Host(cp-9) = %v", err)
	}

	// Marshal writes what Parse reads back.
	b, err := inv.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(strings.NewReader(string(b)), "marshalled")
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(again, inv) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", again, inv)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if inv, err := Load(path); err != nil || len(inv.Hosts) != 3 {
		t.Fatalf("Load = %+v, %v", inv, err)
	}
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"))
	if !errors.Is(err, errkind.InvalidArgument) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v", err)
	}
}

// Every problem is reported, each naming the host, the field and what is
// valid.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	host := func(fields string) string {
		return "vip: 192.0.2.100\nhosts:\n  - name: cp-1\n    address: 192.0.2.11\n    role: control-plane\n" + fields
	}
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", []string{"empty: want vip and hosts"}},
		{"misspelt field", "vip: 192.0.2.100\nhosts:\n  - name: a\n    adress: 192.0.2.1\n", []string{"field adress not found", "fields: vip, hosts[].name, address"}},
		{"misspelt top field", "vips: 192.0.2.100\n", []string{"field vips not found"}},
		{"misspelt ssh field", host("    ssh:\n      usr: x\n"), []string{"field usr not found"}},
		{"two documents", good + "---\nvip: 192.0.2.1\n", []string{"more than one YAML document"}},
		{"no hosts", "vip: 192.0.2.100\n", []string{"hosts: none listed"}},
		{"no vip", "hosts:\n  - name: a\n    address: 192.0.2.1\n    role: control-plane\n", []string{"vip is required"}},
		{"vip hostname", strings.Replace(host(""), "vip: 192.0.2.100", "vip: api.example.com", 1), []string{`vip "api.example.com": want a literal IPv4 or IPv6 address`}},
		{"vip IPv6", strings.Replace(host(""), "vip: 192.0.2.100", "vip: 2001:db8::100", 1), []string{"vip 2001:db8::100: IPv6 VIPs are not supported yet"}},
		{"vip loopback", strings.Replace(host(""), "vip: 192.0.2.100", "vip: 127.0.0.1", 1), []string{"vip 127.0.0.1: want a unicast address"}},
		{"vip a host's", strings.Replace(host(""), "vip: 192.0.2.100", "vip: ::ffff:192.0.2.11", 1), []string{"vip ::ffff:192.0.2.11 is host cp-1's address (hosts[0])"}},
		{"bad name", host("  - name: Web_1\n    address: 192.0.2.12\n    role: worker\n"), []string{`host Web_1 (hosts[1]): name "Web_1": want a DNS-1123 label`}},
		{"long name", host("  - name: " + strings.Repeat("a", 64) + "\n    address: 192.0.2.12\n    role: worker\n"), []string{"longer than 63 characters"}},
		{"no name", host("  - address: 192.0.2.12\n    role: worker\n"), []string{`hosts[1]: name "": required: a DNS-1123 label`}},
		{"duplicate name", host("  - name: cp-1\n    address: 192.0.2.12\n    role: worker\n"), []string{"host cp-1 (hosts[1]): name cp-1 is also hosts[0]'s: names must be unique"}},
		{"duplicate address", host("  - name: cp-2\n    address: 192.0.2.11\n    role: worker\n"), []string{"host cp-2 (hosts[1]): address 192.0.2.11 is also host cp-1's (hosts[0]): one address, one host"}},
		{"duplicate address mapped", host("  - name: cp-2\n    address: \"::ffff:192.0.2.11\"\n    role: worker\n"), []string{"address ::ffff:192.0.2.11 is also host cp-1's"}},
		{"duplicate address v6 spelling", "vip: 192.0.2.100\nhosts:\n  - name: a\n    address: 2001:db8:0::1\n    role: control-plane\n  - name: b\n    address: 2001:DB8::1\n    role: worker\n", []string{"address 2001:DB8::1 is also host a's"}},
		{"duplicate hostname", "vip: 192.0.2.100\nhosts:\n  - name: a\n    address: a.example\n    role: control-plane\n  - name: b\n    address: A.example.\n    role: worker\n", []string{"address A.example. is also host a's"}},
		{"no address", host("  - name: cp-2\n    role: worker\n"), []string{`host cp-2 (hosts[1]): address "": required`}},
		{"bad ipv4", host("  - name: cp-2\n    address: 192.0.2.256\n    role: worker\n"), []string{"not a valid IPv4 address"}},
		{"address with port", host("  - name: cp-2\n    address: 192.0.2.12:22\n    role: worker\n"), []string{"the port is ssh.port"}},
		{"bracketed v6", host("  - name: cp-2\n    address: \"[2001:db8::1]\"\n    role: worker\n"), []string{"without brackets"}},
		{"bad hostname", host("  - name: cp-2\n    address: under_score.example\n    role: worker\n"), []string{`not an IP literal, nor a hostname: label "under_score"`}},
		{"zoned v6", host("  - name: cp-2\n    address: fe80::1%eth0\n    role: worker\n"), []string{"with a zone"}},
		{"loopback address", host("  - name: cp-2\n    address: 127.0.0.1\n    role: worker\n"), []string{"not loopback"}},
		{"no role", host("  - name: cp-2\n    address: 192.0.2.12\n"), []string{"host cp-2 (hosts[1]): role is required: control-plane (a master may run there) or worker (never a master)"}},
		{"bad role", host("  - name: cp-2\n    address: 192.0.2.12\n    role: master\n"), []string{`role "master": want control-plane or worker`}},
		{"no control plane", "vip: 192.0.2.100\nhosts:\n  - name: a\n    address: 192.0.2.1\n    role: worker\n", []string{"no host has role control-plane"}},
		{"port high", host("    ssh:\n      port: 65536\n"), []string{"host cp-1 (hosts[0]): ssh.port 65536: want 1..65535 (default 22)"}},
		{"port negative", host("    ssh:\n      port: -1\n"), []string{"ssh.port -1: want 1..65535"}},
		{"port string", host("    ssh:\n      port: ssh\n"), []string{"cannot unmarshal !!str `ssh` into int"}},
		{"bad user", host("    ssh:\n      user: a@b\n"), []string{`ssh.user "a@b": want a login name`}},
		{"user digit", host("    ssh:\n      user: 1x\n"), []string{"starting with a letter"}},
		{"bad zone", host("    zone: dc 1\n"), []string{`zone "dc 1": want a Kubernetes label value`}},
		{"bad rack", host("    rack: -r1\n"), []string{`rack "-r1": want a Kubernetes label value: starting and ending`}},
		{"several at once", "vip: x\nhosts:\n  - name: A\n    address: 192.0.2.1\n    role: boss\n", []string{`vip "x"`, `name "A"`, `role "boss"`, "no host has role control-plane"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(strings.NewReader(tc.in), "inv.yaml")
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, errkind.InvalidArgument) {
				t.Errorf("not InvalidArgument: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "metal inventory inv.yaml: ") {
				t.Errorf("error does not name the file: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestMarshalValidates(t *testing.T) {
	t.Parallel()
	inv := &Inventory{VIP: "192.0.2.100", Hosts: []Host{{Name: "a", Address: "192.0.2.1", Role: RoleControlPlane}}}
	b, err := inv.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "port: 22") || !strings.Contains(string(b), "user: root") {
		t.Errorf("defaults not written:\n%s", b)
	}
	if inv.Hosts[0].SSH.Port != 0 {
		t.Error("Marshal changed its receiver")
	}
	inv.VIP = "192.0.2.1"
	if _, err := inv.Marshal(); !errors.Is(err, errkind.InvalidArgument) {
		t.Errorf("Marshal of an invalid inventory = %v", err)
	}
}
