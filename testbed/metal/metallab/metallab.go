// Package metallab builds a lab of bare-metal hosts on this machine, for
// the metal provider's tests and rehearsals (bin/metallab): hosts that
// hamaster reaches only as it reaches real ones, over SSH from an
// inventory, with a VIP that keepalived moves between them.
//
//   - Each host is a network namespace (hm-ml<T>-<i>) with loopback up and
//     one interface, eth0, at 198.18.<T>.<i> on a /24 of RFC 2544's
//     benchmark range 198.18.0.0/15, never routed on the internet: T is
//     1..99, below the cloud fakes' VPCs (198.18.100-250; the local
//     provider's benchmark addresses are 198.19.*). One Linux bridge
//     joins them, in a switch namespace of its own (hm-ml<T>-sw), so
//     VRRP's multicast adverts and gratuitous ARPs flow between hosts as
//     on one L2 segment.
//   - The operator (this machine's own namespace) reaches the hosts
//     through one veth into the bridge, hm-ml<T>, at 198.18.<T>.254/24:
//     the only change to the machine's network is that interface and its
//     /24 route. Hosts have no default route and nothing is forwarded:
//     nothing of the lab leaves the machine.
//   - 198.18.<T>.100 is the VIP, held by no host until keepalived gives
//     it to one.
//   - Each host runs its own OpenSSH sshd on port 22 with its own host key
//     (listed under the host's address in DIR/known_hosts), logins by key
//     only (DIR/id_ed25519): LoginUser, not root, with passwordless sudo,
//     the inventory's user; root, for the tests' own inspection. Every
//     session takes Options.LoginDelay to start (a second by default), as
//     on a host whose shell setup is heavy. sshd starts in a mount and UTS namespace
//     of its own (ip netns exec NS unshare --mount --uts --propagation
//     private), so that it and every session it spawns see the host's
//     hostname (its inventory name), /etc/hosts (every host's name), and
//     its own /etc/passwd, /etc/group, /etc/shadow, /etc/sudoers.d and
//     /home (LoginUser's account), /etc/kubernetes, /var/lib/etcd,
//     /var/lib/kubelet,
//     /var/lib/hamaster (the metal provider's claim), /usr/local/bin,
//     /var/log/pods and /run,
//     bind mounts of DIR/hosts/<name>/... Per-host pid files
//     (keepalived's, haproxy's) under /run never clash. The machine's own
//     mount table does not change; a mount point missing on the machine
//     (e.g. /etc/kubernetes) is created, marked in /run/hamaster-metallab,
//     and removed by the last lab using it when it is empty.
//   - DIR/inventory.yaml lists the hosts (providers/metal's format, every
//     host control-plane), DIR/hamaster.env the HAMASTER_* variables that
//     point hamaster at them.
//
// DIR/metallab.json records what the lab made before it makes it; Cleanup
// (bin/metallab --cleanup DIR) removes a killed lab's leftovers from it.
// It needs root, iproute2's ip, util-linux's unshare, OpenSSH's sshd and
// sudo.
package metallab

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/internal/iproute"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers/metal"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
	"github.com/hamaster/hamaster/testbed/slowlogin"
)

// Binaries the lab runs.
const (
	SSHD    = "/usr/sbin/sshd"
	Unshare = kubeadmhost.Unshare
)

// MaxThird bounds the third octet of the lab's /24 (198.18.T.0/24):
// above it are the cloud fakes' VPCs (vpctest, gcefake).
const MaxThird = 99

// MaxHosts bounds Options.Hosts: host addresses are .1 to .MaxHosts, below
// the VIP (.100).
const MaxHosts = 32

// Fixed host parts of the lab's /24.
const (
	vipHost      = 100
	operatorHost = 254
)

// hostMounts are the directories each host has its own copy of (bind
// mounts of DIR/hosts/<name>/<dir with '/' as '-'>): kubeadmhost.Mounts.
func hostMounts() []string { return kubeadmhost.Mounts() }

// Options describe a lab.
type Options struct {
	// Hosts is how many hosts, 1..MaxHosts.
	Hosts int
	// Dir holds the lab's files (created if missing). It must not be under
	// /etc/kubernetes, /var/lib/etcd, /var/lib/kubelet or /run, which the
	// hosts see replaced.
	Dir string
	// Third is the third octet of the lab's /24, 198.18.Third.0/24,
	// 1..MaxThird; 0 picks one no lab and no route of this machine uses.
	Third int
	// Logger receives progress (Info) and teardown details (Debug); nil
	// discards them.
	Logger *slog.Logger

	// Kubelet is the hamaster-kubelet program Install wraps as each
	// host's kubelet (see Install).
	Kubelet string
	// BinDir holds <version>/{kubeadm,kubectl,kube-apiserver,...}, the
	// real binaries (make kube-apiserver).
	BinDir string
	// KubeletRestartDelay is how long the kubelet service waits before
	// restarting an exited kubelet: systemd's RestartSec of kubeadm's
	// kubelet.service (10 s), scaled down; 0 means DefaultKubeletRestartDelay.
	KubeletRestartDelay time.Duration
	// LoginDelay is how long every SSH session on a host takes to start,
	// as a real host's shell setup makes it (package slowlogin): 0 means
	// HAMASTER_SSH_LOGIN_DELAY's, a second when that is unset; negative,
	// none.
	LoginDelay time.Duration
	// NoSudo names hosts whose LoginUser may not use sudo (the test of
	// hamaster's refusal of such a host).
	NoSudo []string
	// Workers is how many of the hosts, the last ones, the inventory
	// lists as role: worker (never a master; KubeadmJoinWorker joins one
	// as kubeadm's docs have an operator join a worker).
	Workers int
}

// Lab is a running set of hosts.
type Lab struct {
	Dir    string
	Subnet netip.Prefix
	// Operator is this machine's address on the hosts' bridge.
	Operator netip.Addr
	// VIP is free for keepalived: no host has it.
	VIP   netip.Addr
	Hosts []*Host
	// Files written for hamaster and ssh.
	ClientKeyFile, KnownHostsFile, InventoryFile, EnvFile string
	// AdminConfFile is where KubeadmInit copies the master's admin.conf.
	AdminConfFile string

	log    *slog.Logger
	rec    *record
	closed bool
	opts   Options
	// loginID is LoginUser's uid and gid on every host; loginDelay the
	// sessions' start-up delay.
	loginID    int
	loginDelay time.Duration
}

// Host is one host of the lab.
type Host struct {
	// Name is the host's inventory name and hostname: host-<i>.
	Name string
	// NS is its network namespace.
	NS string
	// Addr is its address on eth0.
	Addr netip.Addr
	// Dir holds its files: the directories it mounts, sshd's
	// configuration, keys and log (sshd.log).
	Dir string
	// HostKey is its sshd's key.
	HostKey ssh.PublicKey

	sshd   *exec.Cmd
	exited chan struct{}
	// kubelet is the host's kubelet service, once Install started it.
	kubelet *kubeadmhost.Service
}

// New builds the lab: namespaces, bridge, addresses, one sshd per host
// (each answering before New returns), the known_hosts, inventory and env
// files. A previous lab's leftovers recorded in Dir are removed first,
// unless that lab still runs. On error everything made is removed.
func New(ctx context.Context, o Options) (*Lab, error) {
	if o.Hosts < 1 || o.Hosts > MaxHosts {
		return nil, fmt.Errorf("metallab: %d hosts: want 1..%d", o.Hosts, MaxHosts)
	}
	if o.Workers < 0 || o.Workers >= o.Hosts {
		return nil, fmt.Errorf("metallab: %d workers of %d hosts: want 0..%d (a control-plane host is needed)", o.Workers, o.Hosts, o.Hosts-1)
	}
	if o.Third < 0 || o.Third > MaxThird {
		return nil, fmt.Errorf("metallab: third octet %d: want 1..%d, or 0 for a free one", o.Third, MaxThird)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil || o.Dir == "" {
		return nil, fmt.Errorf("metallab: state directory %q: %v", o.Dir, err)
	}
	for _, m := range hostMounts() {
		if dir == m || strings.HasPrefix(dir, m+"/") {
			return nil, fmt.Errorf("metallab: state directory %s is under %s, which every host replaces with its own", dir, m)
		}
	}
	if err := sweepPrevious(ctx, dir, o.Logger); err != nil {
		return nil, err
	}
	createdDir := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		createdDir = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("metallab: state directory: %w", err)
	}
	if o.KubeletRestartDelay <= 0 {
		o.KubeletRestartDelay = DefaultKubeletRestartDelay
	}
	l := &Lab{Dir: dir, log: o.Logger, opts: o,
		ClientKeyFile:  filepath.Join(dir, "id_ed25519"),
		KnownHostsFile: filepath.Join(dir, "known_hosts"),
		InventoryFile:  filepath.Join(dir, "inventory.yaml"),
		EnvFile:        filepath.Join(dir, "hamaster.env"),
		AdminConfFile:  filepath.Join(dir, "admin.conf"),
	}
	l.rec = &record{path: filepath.Join(dir, recordFile), PID: os.Getpid(), CreatedDir: createdDir,
		Files: []string{"id_ed25519", "id_ed25519.pub", "known_hosts", "inventory.yaml", "hamaster.env", "hosts", "admin.conf", "hamaster-state"}}
	if err := l.rec.save(); err != nil {
		if createdDir {
			_ = os.Remove(dir)
		}
		return nil, err
	}
	if err := l.build(ctx, o); err != nil {
		// Removed even when ctx ended (a signal during the set-up).
		if cerr := l.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("metallab: remove the half-built lab: %w", cerr))
		}
		return nil, err
	}
	return l, nil
}

// Preflight names what the machine lacks for a lab.
func Preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("metallab: needs root: its hosts are network namespaces with mounts of their own; run it with sudo")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("metallab: iproute2's ip is missing (apt-get install iproute2)")
	}
	if _, err := exec.LookPath(Unshare); err != nil {
		return errors.New("metallab: util-linux's unshare is missing (apt-get install util-linux)")
	}
	if _, err := os.Stat(SSHD); err != nil {
		return fmt.Errorf("metallab: %s is missing: each host runs OpenSSH's server (apt-get install openssh-server)", SSHD)
	}
	if _, err := os.Stat("/etc/sudoers"); err != nil {
		return fmt.Errorf("metallab: sudo is missing: each host's login user (%s) becomes root with it (apt-get install sudo)", LoginUser)
	}
	return nil
}

// build does New's work; Close undoes whatever part of it was done.
func (l *Lab) build(ctx context.Context, o Options) error {
	third, err := l.claimSubnet(ctx, o.Third)
	if err != nil {
		return err
	}
	l.Subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(third), 0}), 24)
	l.Operator = hostAddr(third, operatorHost)
	l.VIP = hostAddr(third, vipHost)
	bits := "/" + strconv.Itoa(l.Subnet.Bits())
	sw := l.rec.Switch
	steps := [][]string{
		{"-n", sw, "link", "set", "lo", "up"},
		{"-n", sw, "link", "add", "br0", "type", "bridge"},
		{"-n", sw, "link", "set", "br0", "up"},
		{"link", "add", l.rec.Uplink, "type", "veth", "peer", "name", "op", "netns", sw},
		{"-n", sw, "link", "set", "op", "master", "br0"},
		{"-n", sw, "link", "set", "op", "up"},
		{"addr", "add", l.Operator.String() + bits, "dev", l.rec.Uplink},
		{"link", "set", l.rec.Uplink, "up"},
	}
	for _, s := range steps {
		if err := ip(ctx, s...); err != nil {
			return err
		}
	}

	// Keys: the operator's, then each host's.
	clientPub, err := writeKey(l.ClientKeyFile, "metallab operator")
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.ClientKeyFile+".pub", ssh.MarshalAuthorizedKey(clientPub), 0o644); err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(l.Dir, "hosts"), 0o755); err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	if l.loginID, err = freeLoginID(); err != nil {
		return err
	}
	if l.loginDelay, err = loginDelay(o); err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	for i := 1; i <= o.Hosts; i++ {
		h := &Host{Name: "host-" + strconv.Itoa(i), NS: fmt.Sprintf("hm-ml%d-%d", third, i), Addr: hostAddr(third, i)}
		h.Dir = filepath.Join(l.Dir, "hosts", h.Name)
		l.Hosts = append(l.Hosts, h)
		l.rec.Namespaces = append(l.rec.Namespaces, h.NS)
	}
	if err := l.rec.save(); err != nil {
		return err
	}
	var etcHosts strings.Builder
	etcHosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for _, h := range l.Hosts {
		fmt.Fprintf(&etcHosts, "%s\t%s\n", h.Addr, h.Name)
	}
	// From the mount points' check to the hosts' mounts, no other lab
	// removes one (the sshds answer once their mounts are made).
	unlock, err := kubeadmhost.LockMounts(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	created, err := kubeadmhost.EnsureMountPoints(hostMounts())
	l.rec.MountPoints = created
	if serr := l.rec.save(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	for i, h := range l.Hosts {
		port := "h" + strconv.Itoa(i+1)
		steps := [][]string{
			{"netns", "add", h.NS},
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
			{"-n", sw, "link", "set", port, "master", "br0"},
			{"-n", sw, "link", "set", port, "up"},
			{"-n", h.NS, "addr", "add", h.Addr.String() + bits, "dev", "eth0"},
			{"-n", h.NS, "link", "set", "eth0", "up"},
			// A default route, as a real host has one: kubeadm picks a
			// host's address from its default route's interface when no
			// configuration names it (init phase upload-certs without
			// --config: "could not obtain a bind address for the API
			// Server: no default routes found"). Through the operator's
			// address, which forwards nothing.
			{"-n", h.NS, "route", "add", "default", "via", l.Operator.String()},
		}
		for _, s := range steps {
			if err := ip(ctx, s...); err != nil {
				return err
			}
		}
		if err := l.startHost(ctx, h, clientPub, etcHosts.String()); err != nil {
			return err
		}
	}
	// Every sshd answers its host key from the operator's side.
	for _, h := range l.Hosts {
		if err := l.waitSSH(ctx, h); err != nil {
			return err
		}
	}
	unlock()
	return l.writeFiles()
}

// claimSubnet takes the switch namespace hm-ml<T>-sw, which marks the /24
// as this lab's: creating it fails for a T another lab holds. With third
// 0, T is tried at random among those no route of this machine covers.
func (l *Lab) claimSubnet(ctx context.Context, third int) (int, error) {
	for attempt := 1; ; attempt++ {
		t := third
		if t == 0 {
			n, err := rand.Int(rand.Reader, big.NewInt(MaxThird))
			if err != nil {
				return 0, fmt.Errorf("metallab: %w", err)
			}
			t = 1 + int(n.Int64())
		}
		sw := fmt.Sprintf("hm-ml%d-sw", t)
		routed, err := routed(ctx, fmt.Sprintf("198.18.%d.0/24", t))
		if err != nil {
			return 0, err
		}
		if !routed {
			err = ip(ctx, "netns", "add", sw)
			if err == nil {
				l.rec.Third, l.rec.Switch, l.rec.Uplink = t, sw, fmt.Sprintf("hm-ml%d", t)
				return t, l.rec.save()
			}
			if !strings.Contains(err.Error(), "File exists") {
				return 0, err
			}
		}
		if third != 0 {
			return 0, fmt.Errorf("metallab: 198.18.%d.0/24 is in use (a route covers it, or namespace %s exists): pick another, or 0 for a free one", t, sw)
		}
		if attempt == 50 {
			return 0, fmt.Errorf("metallab: no free 198.18.T.0/24 (T 1..%d) after 50 tries", MaxThird)
		}
	}
}

// routed reports whether a route of the machine covers or overlaps cidr:
// one inside it in any table (an address of it on lo is a local route),
// or one of the main table that holds it.
func routed(ctx context.Context, cidr string) (bool, error) {
	for _, sel := range [][]string{{"table", "all", "root", cidr}, {"match", cidr}} {
		out, err := exec.CommandContext(ctx, "ip", append([]string{"-4", "route", "show"}, sel...)...).Output()
		if err != nil {
			return false, fmt.Errorf("metallab: ip route show %s: %w", strings.Join(sel, " "), err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			// "match" lists the default route too: that one is no use.
			if line != "" && !strings.HasPrefix(line, "default") {
				return true, nil
			}
		}
	}
	return false, nil
}

// startHost writes the host's directories, keys and sshd configuration
// and starts its sshd.
func (l *Lab) startHost(ctx context.Context, h *Host, clientPub ssh.PublicKey, etcHosts string) error {
	sshDir := filepath.Join(h.Dir, "ssh")
	if err := os.MkdirAll(sshDir, 0o700); err != nil {
		return fmt.Errorf("metallab: %s: %w", h.Name, err)
	}
	hostArgs, err := kubeadmhost.HostArgs(h.Name, h.Dir, filepath.Join(h.Dir, "etc-hosts"), SSHD, filepath.Join(sshDir, "sshd_config"))
	if err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	if err := writeSystemd(h); err != nil {
		return err
	}
	logins, err := loginMounts(h, l.loginID, !slices.Contains(l.opts.NoSudo, h.Name), clientPub)
	if err != nil {
		return err
	}
	hostArgs = append(hostArgs, logins...)
	args := append([]string{"netns", "exec", h.NS}, kubeadmhost.UnshareArgs("metallab-"+h.Name, hostArgs)...)
	if err := os.WriteFile(filepath.Join(h.Dir, "etc-hosts"), []byte(etcHosts), 0o644); err != nil {
		return fmt.Errorf("metallab: %s: %w", h.Name, err)
	}
	hostKey := filepath.Join(sshDir, "ssh_host_ed25519_key")
	pub, err := writeKey(hostKey, h.Name)
	if err != nil {
		return err
	}
	h.HostKey = pub
	auth := filepath.Join(sshDir, "authorized_keys")
	if err := os.WriteFile(auth, ssh.MarshalAuthorizedKey(clientPub), 0o600); err != nil {
		return fmt.Errorf("metallab: %s: %w", h.Name, err)
	}
	conf := strings.Join(append([]string{
		"# metallab host " + h.Name,
		"ListenAddress 0.0.0.0:22",
		"HostKey " + hostKey,
		"PidFile /run/sshd.pid",
		"AuthorizedKeysFile " + auth,
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PubkeyAuthentication yes",
		"StrictModes no",
		"UsePAM no",
		"AllowTcpForwarding yes",
		"X11Forwarding no",
		"PrintMotd no",
		// A program, not internal-sftp: under the login delay's
		// ForceCommand a subsystem runs as a command.
		"Subsystem sftp /usr/lib/openssh/sftp-server",
		"LogLevel VERBOSE",
	}, append(slowlogin.SSHDConfig(l.loginDelay),
		// sshd reads a user's keys as that user: LoginUser's are in its
		// home (Match blocks come last).
		"Match User "+LoginUser,
		"    AuthorizedKeysFile .ssh/authorized_keys",
		"")...), "\n")
	if err := os.WriteFile(filepath.Join(sshDir, "sshd_config"), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("metallab: %s: %w", h.Name, err)
	}
	logf, err := os.OpenFile(filepath.Join(h.Dir, "sshd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("metallab: %s: %w", h.Name, err)
	}
	defer logf.Close()
	// Not CommandContext: sshd lives as long as the lab, not as New's ctx.
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A lab process killed without its teardown takes its sshds with it
	// (their namespaces stay: Cleanup).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("metallab: start %s's sshd: %w", h.Name, err)
	}
	h.sshd, h.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(h.exited)
	}()
	l.log.Debug("started sshd", "host", h.Name, "ns", h.NS, "pid", cmd.Process.Pid)
	return nil
}

// sshStartTimeout bounds the wait for a host's sshd to answer.
const sshStartTimeout = 15 * time.Second

// waitSSH waits until the host's sshd shows its host key on the host's
// address.
func (l *Lab) waitSSH(ctx context.Context, h *Host) error {
	ctx, cancel := context.WithTimeout(ctx, sshStartTimeout)
	defer cancel()
	addr := net.JoinHostPort(h.Addr.String(), "22")
	var last error
	err := wait.Until(ctx, 50*time.Millisecond, h.Name+"'s sshd on "+addr, func() (bool, error) {
		select {
		case <-h.exited:
			return false, fmt.Errorf("metallab: %s's sshd exited: %s", h.Name, h.LogTail())
		default:
		}
		last = probeHostKey(ctx, addr, h.HostKey)
		return last == nil, nil
	})
	if err != nil && last != nil {
		err = fmt.Errorf("%w (last: %v); sshd log: %s", err, last, h.LogTail())
	}
	return err
}

// errKeyShown ends a probe's handshake once the host key is seen.
var errKeyShown = errors.New("host key shown")

// probeHostKey does an SSH handshake with addr up to the host key, and
// checks it is want.
func probeHostKey(ctx context.Context, addr string, want ssh.PublicKey) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	var got ssh.PublicKey
	_, _, _, err = ssh.NewClientConn(conn, addr, &ssh.ClientConfig{User: "probe",
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error { got = k; return errKeyShown }})
	if got == nil {
		return fmt.Errorf("no host key from %s: %v", addr, err)
	}
	if string(got.Marshal()) != string(want.Marshal()) {
		return fmt.Errorf("%s shows host key %s, not the host's", addr, ssh.FingerprintSHA256(got))
	}
	return nil
}

// LogTail is the end of the host's sshd log.
func (h *Host) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(h.Dir, "sshd.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// writeFiles writes known_hosts, the inventory and hamaster.env (last:
// its presence says the lab is ready).
func (l *Lab) writeFiles() error {
	var kh strings.Builder
	inv := metal.Inventory{VIP: l.VIP.String()}
	for i, h := range l.Hosts {
		kh.WriteString(knownhosts.Line([]string{knownhosts.Normalize(h.Addr.String())}, h.HostKey) + "\n")
		role := metal.RoleControlPlane
		if i >= len(l.Hosts)-l.opts.Workers {
			role = metal.RoleWorker
		}
		inv.Hosts = append(inv.Hosts, metal.Host{Name: h.Name, Address: h.Addr.String(), Role: role,
			SSH: metal.SSH{User: LoginUser, Port: 22}})
	}
	if err := writeAtomic(l.KnownHostsFile, []byte(kh.String()), 0o644); err != nil {
		return err
	}
	invYAML, err := inv.Marshal()
	if err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	invYAML = append([]byte("# Written by metallab: the lab's hosts (removed when it stops).\n"), invYAML...)
	if err := writeAtomic(l.InventoryFile, invYAML, 0o644); err != nil {
		return err
	}
	var hosts []string
	for _, h := range l.Hosts {
		hosts = append(hosts, h.Name+"="+h.Addr.String())
	}
	env := strings.Join([]string{
		"# Written by metallab: point hamaster at the lab's hosts (. this file).",
		"# Removed when metallab stops.",
		"export HAMASTER_PROVIDER=metal",
		"export HAMASTER_METAL_INVENTORY=" + l.InventoryFile,
		"export HAMASTER_METAL_VIP=" + l.VIP.String(),
		"export HAMASTER_SSH_KEY=" + l.ClientKeyFile,
		"export HAMASTER_SSH_KNOWN_HOSTS=" + l.KnownHostsFile,
		"# hamaster's journals and records of this lab, gone with it (a later lab's",
		"# clusters start with none).",
		"export HAMASTER_STATE_DIR=" + filepath.Join(l.Dir, "hamaster-state"),
		"# The kubeadm flavor's package install on the lab's hosts (its stand-in for apt-get).",
		"export HAMASTER_KUBEADM_INSTALL_COMMAND='" + InstallCommand + "'",
		"export HAMASTER_KUBEADM_IGNORE_PREFLIGHT_ERRORS=" + IgnorePreflightErrors,
		"# Its stand-in for systemctl restart kubelet (the hosts run no systemd).",
		"export HAMASTER_KUBEADM_RESTART_KUBELET_COMMAND='" + RestartKubeletCommand + "'",
		"# Not hamaster's: the lab's hosts (name=address) and this machine's address on their bridge.",
		"export METALLAB_HOSTS='" + strings.Join(hosts, " ") + "'",
		"export METALLAB_OPERATOR=" + l.Operator.String(),
	}, "\n") + "\n"
	if _, err := os.Stat(l.AdminConfFile); err == nil {
		env += "# The kubeadm master's admin.conf (metallab --kubeadm-master).\nexport KUBECONFIG=" + l.AdminConfFile + "\n"
	}
	return writeAtomic(l.EnvFile, []byte(env), 0o644)
}

// Dial logs in to the host as root over SSH with the lab's key, its host
// key checked against DIR/known_hosts (hamaster's own SSH client).
func (l *Lab) Dial(ctx context.Context, h *Host) (*remote.Client, error) {
	c, err := remote.Dial(ctx, remote.Config{Addr: net.JoinHostPort(h.Addr.String(), "22"), User: "root",
		KeyFile: l.ClientKeyFile, KnownHostsFile: l.KnownHostsFile, KeepaliveInterval: -1})
	if err != nil {
		return nil, fmt.Errorf("metallab: ssh to %s: %w", h.Name, err)
	}
	return c, nil
}

// Host returns the host called name, or nil.
func (l *Lab) Host(name string) *Host {
	for _, h := range l.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Switch is the switch namespace holding the bridge br0; host i's port
// on it is h<i>.
func (l *Lab) Switch() string { return l.rec.Switch }

// Uplink is the operator's interface on the bridge.
func (l *Lab) Uplink() string { return l.rec.Uplink }

// Close stops every process in the hosts' namespaces (sshd, the sessions,
// whatever they started), deletes the namespaces, the bridge and the
// uplink, the mount points the labs created that no lab uses now, and
// every file the lab wrote in Dir (Dir too when the lab created it).
// Calling it again does nothing. ctx bounds the ip commands: give it
// one that has not ended (a signal's context has).
func (l *Lab) Close(ctx context.Context) error {
	if l.closed {
		return nil
	}
	l.closed = true
	// The kubelet services first (they stop their pods), then every
	// process left in the hosts.
	for _, h := range l.Hosts {
		if h.kubelet != nil {
			h.kubelet.Close(kubeadmhost.KubeletStopWait)
		}
	}
	err := teardown(ctx, l.rec, l.log)
	// The sshds are this process's children: reap them.
	for _, h := range l.Hosts {
		if h.sshd == nil {
			continue
		}
		timer := time.NewTimer(5 * time.Second)
		select {
		case <-h.exited:
		case <-timer.C:
			_ = h.sshd.Process.Kill()
			<-h.exited
		}
		timer.Stop()
	}
	return err
}

func hostAddr(third, host int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(third), byte(host)})
}

// writeKey generates an ed25519 key, writes it unencrypted in OpenSSH
// format and returns its public half.
func writeKey(path, comment string) (ssh.PublicKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("metallab: generate key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("metallab: marshal key: %w", err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, fmt.Errorf("metallab: write key: %w", err)
	}
	pub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		return nil, fmt.Errorf("metallab: public key: %w", err)
	}
	return pub, nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path+".tmp", data, mode); err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("metallab: %w", err)
	}
	return nil
}

func ip(ctx context.Context, args ...string) error { return iproute.Run(ctx, "metallab", args...) }

// ipTolerant is ip for deletions: what is already gone is success.
func ipTolerant(ctx context.Context, args ...string) error {
	return iproute.RunTolerant(ctx, "metallab", []string{"No such file", "Cannot find device", "does not exist"}, args...)
}
