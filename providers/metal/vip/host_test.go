package vip

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/remote"
)

// fakeExec answers commands by their first matching substring and
// records uploads; uploadErr fails every upload.
type fakeExec struct {
	answers   map[string]string
	ran       []string
	uploads   map[string][]byte
	uploadErr error
	// runErr fails a command containing the key.
	runErr map[string]error
}

func (f *fakeExec) Run(_ context.Context, cmd string) ([]byte, []byte, error) {
	f.ran = append(f.ran, cmd)
	for k, err := range f.runErr {
		if strings.Contains(cmd, k) {
			return nil, nil, err
		}
	}
	for k, v := range f.answers {
		if strings.Contains(cmd, k) {
			return []byte(v), nil, nil
		}
	}
	return nil, nil, nil
}

func (f *fakeExec) Upload(_ context.Context, path string, data []byte, _ os.FileMode) error {
	if f.uploadErr != nil {
		return f.uploadErr
	}
	if f.uploads == nil {
		f.uploads = map[string][]byte{}
	}
	f.uploads[path] = data
	return nil
}

// show stat as HAProxy 2.6 answers it (columns cut after check_status).
// The frontend is called apiserver too (the cluster endpoint): its
// FRONTEND row is no target.
const showStat = `# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,addr
hamaster_health,FRONTEND,,,0,0,9984,0,0,0,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,0,0,0,,
apiserver,FRONTEND,,,0,0,9984,0,0,0,0,0,0,,,,,OPEN,,,,,,,,,1,3,0,,,,0,0,0,0,,
apiserver,cp-1,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP,1,1,0,0,0,5,0,,1,3,1,,0,,2,0,,0,L7OK,192.0.2.11:6443
apiserver,cp-2,0,0,0,0,,0,0,0,,0,,0,0,0,0,DRAIN,0,1,0,0,0,5,0,,1,3,2,,0,,2,0,,0,L7OK,192.0.2.12:6443
apiserver,cp-3,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN,1,1,0,2,1,5,3,,1,3,3,,0,,2,0,,0,L4CON,192.0.2.13:6443
apiserver,cp-4,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP,0,1,0,0,0,5,0,,1,3,4,,0,,2,0,,0,L7OK,192.0.2.14:6443
apiserver,BACKEND,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP,2,2,0,,0,5,0,,1,3,0,,0,,1,0,,0,,
`

func TestStatus(t *testing.T) {
	t.Parallel()
	h := Host{Name: "cp-1", Exec: &fakeExec{answers: map[string]string{"show stat": showStat}}}
	ts, err := Status(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name              string
		healthy, draining bool
		reason            string
	}{
		{"cp-1", true, false, "UP L7OK"},
		{"cp-2", true, true, "DRAIN L7OK"},
		{"cp-3", false, false, "DOWN L4CON"},
		{"cp-4", true, true, "UP L7OK"}, // weight 0 from Config.Drained
	}
	if len(ts) != len(want) {
		t.Fatalf("Status = %+v", ts)
	}
	for i, w := range want {
		if g := ts[i]; g.Name != w.name || g.Healthy != w.healthy || g.Draining != w.draining || g.Reason != w.reason {
			t.Errorf("target %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestDrainErrors(t *testing.T) {
	t.Parallel()
	h := Host{Name: "cp-1", Exec: &fakeExec{answers: map[string]string{"set server": "No such server.\n"}}}
	if err := Drain(context.Background(), h, "cp-9"); !errors.Is(err, errkind.NotFound) || !strings.Contains(err.Error(), "on cp-1") {
		t.Errorf("Drain of an unknown server = %v", err)
	}
	if err := Drain(context.Background(), h, "x; reboot"); !errors.Is(err, errkind.InvalidArgument) {
		t.Errorf("Drain of a bad name = %v", err)
	}
	ok := &fakeExec{}
	if err := Ready(context.Background(), Host{Name: "cp-1", Exec: ok}, "cp-2"); err != nil || !strings.Contains(strings.Join(ok.ran, "\n"), "'set server apiserver/cp-2 state ready'") {
		t.Errorf("Ready = %v, ran %q", err, ok.ran)
	}
	ended := &fakeExec{}
	if err := EndSessions(context.Background(), Host{Name: "cp-1", Exec: ended}, "cp-2"); err != nil || !strings.Contains(strings.Join(ended.ran, "\n"), "'shutdown sessions server apiserver/cp-2'") {
		t.Errorf("EndSessions = %v, ran %q", err, ended.ran)
	}
	if err := EndSessions(context.Background(), Host{Name: "cp-1", Exec: &fakeExec{answers: map[string]string{"shutdown sessions": "No such server.\n"}}}, "cp-9"); !errors.Is(err, errkind.NotFound) {
		t.Errorf("EndSessions of an unknown server = %v", err)
	}
}

// Apply writes only what differs and names the host and file when it
// cannot; the interface and the daemons are found on the host.
func TestApplyFake(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Interface = ""
	f, err := Render(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	// The host has every file as rendered except haproxy.cfg, Debian's
	// daemons and systemd. One session reads all of it.
	var read strings.Builder
	read.WriteString("daemon keepalived /usr/sbin/keepalived Keepalived v2.2.7 (01/16,2022)\ndaemon haproxy /usr/sbin/haproxy HAProxy version 2.6.12-1+deb12u4 2026/10/17 - https://haproxy.org/\nsystemctl /usr/bin/systemctl\n")
	read.WriteString("iface 2: eth0    inet 192.0.2.12/24 brd 192.0.2.255 scope global eth0\n")
	read.WriteString("unit " + KeepalivedUnit + " active\nunit " + HAProxyUnit + " active\n")
	for _, x := range f.All() {
		if x.Path != HAProxyCfgPath {
			fmt.Fprintf(&read, "%s %s %x\n", x.Path, strconv.FormatUint(uint64(x.Mode.Perm()), 8), sha256.Sum256(x.Data))
		}
	}
	answers := map[string]string{"sha256sum": read.String()}
	ex := &fakeExec{answers: answers}
	res, err := Apply(context.Background(), Host{Name: "cp-2", Exec: ex}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Interface != "eth0" || len(res.Written) != 1 || res.Written[0] != HAProxyCfgPath || len(res.Reloaded) != 0 {
		t.Errorf("Apply = %+v", res)
	}
	// Sessions (each a second on a slow host): one read (the daemons, the
	// interface, every file), one write of every changed file with
	// haproxy's reload (it does not run: nothing signalled) and the units
	// enabled and started.
	if len(ex.ran) != 2 || !strings.Contains(ex.ran[0], "mkdir -p "+ConfigDir) || !strings.Contains(ex.ran[0], "command -v $d") {
		t.Fatalf("Apply ran %d commands, want 2 (one read, one write): %q", len(ex.ran), ex.ran)
	}
	write := ex.ran[1]
	for _, w := range []string{remote.WriteFileScript(HAProxyCfgPath, f.HAProxyCfg.Data, f.HAProxyCfg.Mode), "rm -f " + LegacyManifestsDir + "/hamaster-keepalived.yaml", "kill -USR2", "systemctl enable --now " + KeepalivedUnit + " " + HAProxyUnit} {
		if !strings.Contains(write, w) {
			t.Errorf("the write session lacks %q:\n%s", w, write)
		}
	}
	if strings.Contains(write, "kill -HUP") || strings.Contains(write, "daemon-reload") {
		t.Errorf("the write session reloads what did not change:\n%s", write)
	}
	// Nothing differs: one session, nothing started.
	var same strings.Builder
	same.WriteString(read.String())
	fmt.Fprintf(&same, "%s %s %x\n", HAProxyCfgPath, "644", sha256.Sum256(f.HAProxyCfg.Data))
	ex = &fakeExec{answers: map[string]string{"sha256sum": same.String()}}
	if res, err := Apply(context.Background(), Host{Name: "cp-2", Exec: ex}, cfg); err != nil || len(res.Written) != 0 || len(ex.ran) != 1 {
		t.Errorf("Apply of what is there = %+v, %v, ran %q", res, err, ex.ran)
	}
	// Everything in place but a unit that does not run (a run that died
	// before starting it): the units started, nothing written.
	ex = &fakeExec{answers: map[string]string{"sha256sum": strings.Replace(same.String(), HAProxyUnit+" active", HAProxyUnit+" inactive", 1)}}
	if res, err := Apply(context.Background(), Host{Name: "cp-2", Exec: ex}, cfg); err != nil || len(res.Written) != 0 || len(ex.ran) != 2 || !strings.Contains(ex.ran[1], "systemctl enable --now") {
		t.Errorf("Apply with haproxy's unit inactive = %+v, %v, ran %q", res, err, ex.ran)
	}
	ex = &fakeExec{answers: answers, runErr: map[string]error{"base64 -d": errors.New("disk full")}}
	_, err = Apply(context.Background(), Host{Name: "cp-2", Exec: ex}, cfg)
	if err == nil || !strings.Contains(err.Error(), "write "+HAProxyCfgPath+" on cp-2: disk full") {
		t.Errorf("Apply with a failing upload = %v", err)
	}
	// An old keepalived: refused before anything is written.
	ex = &fakeExec{answers: map[string]string{"sha256sum": strings.Replace(read.String(), "v2.2.7", "v2.0.20", 1)}}
	if _, err := Apply(context.Background(), Host{Name: "cp-2", Exec: ex}, cfg); !errors.Is(err, errkind.FailedPrecondition) || !strings.Contains(err.Error(), "keepalived 2.0.20") || len(ex.ran) != 1 {
		t.Errorf("Apply on a host with keepalived 2.0.20 = %v, ran %q", err, ex.ran)
	}
	// No interface holds the address.
	ex = &fakeExec{answers: map[string]string{"sha256sum": strings.Replace(read.String(), "iface 2: eth0    inet 192.0.2.12/24 brd 192.0.2.255 scope global eth0", "iface", 1)}}
	if _, err := Apply(context.Background(), Host{Name: "cp-2", Exec: ex}, cfg); !errors.Is(err, errkind.NotFound) || !strings.Contains(err.Error(), "on cp-2") {
		t.Errorf("Apply without the interface = %v", err)
	}
}

// moving is a host whose "ip addr" shows the VIP until its maintenance
// file says 1 (the peer: after the old holder's does).
type moving struct {
	log      *[]string
	name     string
	vip      string
	holds    func() bool
	maintain bool
	// state is its keepalived's recorded state; nil: BACKUP.
	state func() string
}

// movingMu serializes the fake hosts' commands: Handoff polls its hosts
// at once, and the fakes share their log and the tests' counters.
var movingMu sync.Mutex

func (m *moving) Run(_ context.Context, cmd string) ([]byte, []byte, error) {
	movingMu.Lock()
	defer movingMu.Unlock()
	first, _, _ := strings.Cut(cmd, "\n")
	*m.log = append(*m.log, m.name+": "+first)
	if strings.HasPrefix(cmd, "ip -o addr show") && m.holds() {
		return []byte("2: eth0    inet " + m.vip + "/32 scope global eth0\n"), nil, nil
	}
	if strings.Contains(cmd, "nft -f -") {
		return []byte("dropping\n"), nil, nil
	}
	if strings.HasPrefix(cmd, "cat "+StatePath) {
		if m.state == nil {
			return []byte("BACKUP\n"), nil, nil
		}
		return []byte(m.state() + "\n"), nil, nil
	}
	return nil, nil, nil
}

func (m *moving) Upload(_ context.Context, path string, data []byte, _ os.FileMode) error {
	movingMu.Lock()
	defer movingMu.Unlock()
	*m.log = append(*m.log, m.name+": write "+path+" "+strings.TrimSpace(string(data)))
	m.maintain = path == MaintenancePath && string(data) == "1\n"
	return nil
}

// Handoff drops new connections to the VIP on the holder (nftables)
// before it writes the maintenance file, and stops once another master
// holds the VIP.
func TestHandoffDropsSYNWhileTheVIPMoves(t *testing.T) {
	t.Parallel()
	var log []string
	old := &moving{log: &log, name: "cp-1", vip: "192.0.2.100"}
	old.holds = func() bool { return !old.maintain }
	peer := &moving{log: &log, name: "cp-2", vip: "192.0.2.100", holds: func() bool { return old.maintain }}
	if err := Handoff(t.Context(), Host{Name: "cp-1", Exec: old}, []Host{{Name: "cp-2", Exec: peer}}, "192.0.2.100"); err != nil {
		t.Fatal(err)
	}
	idx := func(prefix string) int {
		for i, l := range log {
			if strings.HasPrefix(l, prefix) {
				return i
			}
		}
		t.Fatalf("%q not in %q", prefix, log)
		return -1
	}
	drop, maint, undrop := idx("cp-1: command -v nft"), idx("cp-1: write "+MaintenancePath+" 1"), -1
	for i, l := range log {
		if strings.HasPrefix(l, "cp-1: command -v nft") && i > drop {
			undrop = i
		}
	}
	if !(drop < maint && maint < undrop) {
		t.Errorf("want drop < maintenance < undrop, got %d %d %d: %q", drop, maint, undrop, log)
	}
}

// A holder whose keepalived drops the VIP the moment the maintenance
// file is written, before any peer has taken it: Handoff returns only
// once a peer holds it (it used to return at once, leaving the VIP held
// by nobody for the peer's advertisement timeout).
func TestHandoffWaitsForTheNewHolder(t *testing.T) {
	t.Parallel()
	var log []string
	old := &moving{log: &log, name: "cp-1", vip: "192.0.2.100"}
	old.holds = func() bool { return !old.maintain }
	polls := 0
	peer := &moving{log: &log, name: "cp-2", vip: "192.0.2.100", holds: func() bool {
		if !old.maintain {
			return false
		}
		polls++
		return polls > 3 // its advertisement timeout: a few polls later
	}}
	if err := Handoff(t.Context(), Host{Name: "cp-1", Exec: old}, []Host{{Name: "cp-2", Exec: peer}}, "192.0.2.100"); err != nil {
		t.Fatal(err)
	}
	if polls <= 3 {
		t.Errorf("Handoff returned before cp-2 held the VIP (%d polls of cp-2): %q", polls, log)
	}
}

// Handoff writes the maintenance file only once a peer's keepalived is
// in BACKUP: a peer still in FAULT (just added, its check not yet risen)
// would miss the holder's priority-0 advert.
func TestHandoffWaitsForAPeerInBackup(t *testing.T) {
	t.Parallel()
	var log []string
	old := &moving{log: &log, name: "cp-1", vip: "192.0.2.100"}
	old.holds = func() bool { return !old.maintain }
	reads := 0
	peer := &moving{log: &log, name: "cp-2", vip: "192.0.2.100", holds: func() bool { return old.maintain }, state: func() string {
		reads++
		if reads < 3 {
			return "FAULT"
		}
		return "BACKUP"
	}}
	if err := Handoff(t.Context(), Host{Name: "cp-1", Exec: old}, []Host{{Name: "cp-2", Exec: peer}}, "192.0.2.100"); err != nil {
		t.Fatal(err)
	}
	maint := slices.Index(log, "cp-1: write "+MaintenancePath+" 1")
	backup := -1
	for i, l := range log {
		if strings.HasPrefix(l, "cp-2: cat "+StatePath) {
			backup = i // the last read: BACKUP
		}
	}
	if reads < 3 || maint < 0 || backup > maint {
		t.Errorf("maintenance written at %d, the peer's last state read at %d (%d reads): %q", maint, backup, reads, log)
	}
}

// CheckPrefix reads the prefix of the interface holding the master's
// address ("ip -o -4 addr show to ADDR/32", as iproute2 prints it) and
// refuses a VIP outside it or equal to the master's own address, naming
// the host and the prefix.
func TestCheckPrefix(t *testing.T) {
	t.Parallel()
	const line = "2: eth0@if7    inet 198.18.6.1/24 brd 198.18.6.255 scope global eth0\\       valid_lft forever preferred_lft forever\n"
	for _, c := range []struct {
		name, out, vip string
		kind           error
		says           string
	}{
		{"inside", line, "198.18.6.100", nil, ""},
		{"outside", line, "198.18.7.100", errkind.InvalidArgument, "outside cp-1's subnet: cp-1 holds 198.18.6.1 on eth0 (198.18.6.1/24)"},
		{"its own address", line, "198.18.6.1", errkind.InvalidArgument, "cp-1's own address"},
		{"no interface", "", "198.18.6.100", errkind.NotFound, "on cp-1: no interface holds 198.18.6.1"},
		{"not an address", line, "vip.example", errkind.InvalidArgument, "not an IPv4 address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			x := &fakeExec{answers: map[string]string{"addr show to": c.out}}
			err := CheckPrefix(t.Context(), Host{Name: "cp-1", Exec: x}, "198.18.6.1", c.vip)
			if c.kind == nil {
				if err != nil {
					t.Errorf("err %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, c.kind) || err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("err %v, want %v saying %q", err, c.kind, c.says)
			}
		})
	}
}
