// Package sshtest starts a real OpenSSH server for tests: /usr/sbin/sshd
// (Debian's openssh-server, installed by .ci/run) in the foreground on
// 127.0.0.1 and a free port, as the current user, with freshly generated
// host keys, one authorized client key and a known_hosts file that lists the
// host keys. Nothing outside a temporary directory is touched, except that
// sshd run as root needs its privilege separation directory /run/sshd,
// which is created when missing (systemd normally does it).
//
// Every session starts as slowly as on a real host with a heavy shell
// setup: a second, or what HAMASTER_SSH_LOGIN_DELAY says (package
// testbed/slowlogin).
//
// Every process the server starts (the per-connection sshd processes and
// the commands they run) is killed when the test ends.
package sshtest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/internal/proctree"
	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/testbed/slowlogin"
)

// SSHD is the server binary.
const SSHD = "/usr/sbin/sshd"

// privsepDir is the privilege separation directory Debian's sshd chroots
// into when run as root.
const privsepDir = "/run/sshd"

// startTimeout bounds how long Start waits for sshd to listen.
const startTimeout = 15 * time.Second

// Options configure Start.
type Options struct {
	// Config lines for sshd_config, e.g. "PermitOpen 127.0.0.1:2379" or
	// "LogLevel DEBUG1". They go first, so they override the defaults (sshd
	// takes the first value of each keyword); no Match blocks, and a
	// LogLevel of at least INFO (Start waits for the "Server listening"
	// line).
	Config []string
}

// Server is a running sshd.
type Server struct {
	Addr string // 127.0.0.1:port
	User string // the current user, let in with ClientKeyFile
	Dir  string // holds the configuration, keys and known_hosts
	// ClientKeyFile is an unencrypted OpenSSH private key whose public half
	// is the only authorized key; ClientKey is the same key.
	ClientKeyFile string
	ClientKey     ed25519.PrivateKey
	// HostKeys are the server's host keys: ed25519, then ECDSA P-256.
	HostKeys []ssh.PublicKey
	// KnownHostsFile lists every host key for Addr.
	KnownHostsFile string

	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	logr *os.File
	read chan struct{} // closed when the log reader is done
}

// Start starts sshd and registers its shutdown with t.Cleanup. Without
// /usr/sbin/sshd it skips the test, or fails it when the environment says CI
// (CI=true), where .ci/run must have installed openssh-server. It fails t
// on any other error, printing sshd's log.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if _, err := os.Stat(SSHD); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("sshtest: %s is missing: .ci/run must install Debian's openssh-server (%v)", SSHD, err)
		}
		t.Skipf("sshtest: %s is missing; install it with: apt-get install -y openssh-server", SSHD)
	}
	if os.Geteuid() == 0 {
		if err := os.MkdirAll(privsepDir, 0o755); err != nil {
			t.Fatalf("sshtest: sshd's privilege separation directory: %v", err)
		}
	} else if _, err := os.Stat(privsepDir); err != nil {
		// Not needed by a non-root sshd, which does not chroot, but some
		// builds check for it all the same.
		t.Skipf("sshtest: %s is missing and only root may create it (sshd needs it without systemd)", privsepDir)
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("sshtest: current user: %v", err)
	}
	s := &Server{User: u.Username, Dir: t.TempDir()}
	s.writeKeys(t)

	// The port was free a moment ago; another process may take it before
	// sshd binds it, so try a few times.
	for attempt := 1; ; attempt++ {
		err := s.start(t, opts)
		if err == nil {
			return s
		}
		if attempt == 5 || !strings.Contains(s.Log(), "Address already in use") {
			t.Fatalf("sshtest: %v\nsshd log:\n%s", err, s.Log())
		}
	}
}

// Log returns what sshd has logged so far (LogLevel VERBOSE).
func (s *Server) Log() string {
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// KnownHosts writes a known_hosts file with lines for keys under the
// address addr (host:port, normalized as OpenSSH writes it) and returns its
// path. Raw lines (markers, hashed hosts) can be appended with extra.
func (s *Server) KnownHosts(t testing.TB, addr string, keys []ssh.PublicKey, extra ...string) string {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(addr)}, k) + "\n")
	}
	for _, l := range extra {
		b.WriteString(l + "\n")
	}
	f, err := os.CreateTemp(s.Dir, "known_hosts-*")
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatalf("sshtest: write known_hosts: %v", err)
	}
	return f.Name()
}

// NewKey generates an ed25519 key, writes it unencrypted in OpenSSH format
// to dir/name and returns the file and the key.
func NewKey(t testing.TB, dir, name string) (string, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("sshtest: generate key: %v", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, name)
	if err != nil {
		t.Fatalf("sshtest: marshal key: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatalf("sshtest: write key: %v", err)
	}
	return path, priv
}

// PublicKey is key's SSH public key.
func PublicKey(t testing.TB, key ed25519.PrivateKey) ssh.PublicKey {
	t.Helper()
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatalf("sshtest: public key: %v", err)
	}
	return pub
}

// writeKeys writes the host keys, the client key and authorized_keys.
func (s *Server) writeKeys(t testing.TB) {
	t.Helper()
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("sshtest: host key: %v", err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("sshtest: host key: %v", err)
	}
	for _, hk := range []struct {
		name string
		key  any
	}{{"ssh_host_ed25519_key", edKey}, {"ssh_host_ecdsa_key", ecKey}} {
		block, err := ssh.MarshalPrivateKey(hk.key, "sshtest host key")
		if err != nil {
			t.Fatalf("sshtest: marshal host key: %v", err)
		}
		if err := os.WriteFile(filepath.Join(s.Dir, hk.name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatalf("sshtest: write host key: %v", err)
		}
		signer, err := ssh.NewSignerFromKey(hk.key)
		if err != nil {
			t.Fatalf("sshtest: host key: %v", err)
		}
		s.HostKeys = append(s.HostKeys, signer.PublicKey())
	}
	s.ClientKeyFile, s.ClientKey = NewKey(t, s.Dir, "client_key")
	if err := os.WriteFile(filepath.Join(s.Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(PublicKey(t, s.ClientKey)), 0o600); err != nil {
		t.Fatalf("sshtest: write authorized_keys: %v", err)
	}
}

// start writes sshd_config for a free port, starts sshd and waits until it
// listens. It returns an error when sshd exits first (the caller retries on
// a port taken meanwhile) and fails t on anything else.
func (s *Server) start(t testing.TB, opts Options) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sshtest: find a free port: %v", err)
	}
	s.Addr = l.Addr().String()
	l.Close()

	delay, err := slowlogin.FromEnv()
	if err != nil {
		t.Fatalf("sshtest: %v", err)
	}
	conf := append(append(append([]string(nil), opts.Config...), slowlogin.SSHDConfig(delay)...),
		"ListenAddress "+s.Addr,
		"HostKey "+filepath.Join(s.Dir, "ssh_host_ed25519_key"),
		"HostKey "+filepath.Join(s.Dir, "ssh_host_ecdsa_key"),
		"PidFile "+filepath.Join(s.Dir, "sshd.pid"),
		"AuthorizedKeysFile "+filepath.Join(s.Dir, "authorized_keys"),
		"StrictModes no",
		"UsePAM no",
		"AllowTcpForwarding yes",
		"PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"AllowAgentForwarding no",
		"X11Forwarding no",
		"PrintMotd no",
		"PrintLastLog no",
		"UseDNS no",
		"MaxStartups 100",
		"MaxSessions 100",
		// The user's shell setup runs as on any host (bash sources
		// ~/.bashrc for commands run by sshd), on top of slowlogin's delay
		// (a second unless HAMASTER_SSH_LOGIN_DELAY says).
		"LogLevel VERBOSE",
	)
	cfgFile := filepath.Join(s.Dir, "sshd_config")
	if err := os.WriteFile(cfgFile, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		t.Fatalf("sshtest: write sshd_config: %v", err)
	}
	s.KnownHostsFile = filepath.Join(s.Dir, "known_hosts")
	var kh strings.Builder
	for _, k := range s.HostKeys {
		kh.WriteString(knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, k) + "\n")
	}
	if err := os.WriteFile(s.KnownHostsFile, []byte(kh.String()), 0o600); err != nil {
		t.Fatalf("sshtest: write known_hosts: %v", err)
	}

	// sshd's children inherit stderr, so the log pipe is read to EOF
	// independently of the process's exit.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatalf("sshtest: pipe: %v", err)
	}
	s.log = &syncbuf.Buffer{}
	s.logr = r
	s.read = make(chan struct{})
	s.cmd = exec.Command(SSHD, "-D", "-e", "-f", cfgFile)
	s.cmd.Stdout = w
	s.cmd.Stderr = w
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		w.Close()
		r.Close()
		t.Fatalf("sshtest: start %s: %v", SSHD, err)
	}
	w.Close()

	listening := make(chan struct{})
	go s.readLog(listening)
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-listening:
		t.Cleanup(func() { s.stop(t, exited) })
		return nil
	case err := <-exited:
		s.closeLog()
		return fmt.Errorf("sshd exited before listening on %s: %v", s.Addr, err)
	case <-timer.C:
		s.kill(exited)
		return fmt.Errorf("sshd not listening on %s after %s", s.Addr, startTimeout)
	}
}

// readLog copies sshd's output into the log and closes listening on the
// line that says it listens.
func (s *Server) readLog(listening chan struct{}) {
	defer close(s.read)
	sc := bufio.NewScanner(s.logr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := false
	for sc.Scan() {
		fmt.Fprintln(s.log, sc.Text())
		if !seen && strings.Contains(sc.Text(), "Server listening on") {
			seen = true
			close(listening)
		}
	}
}

// closeLog waits a little for the log reader to reach EOF (every process
// holding the pipe gone), then closes the pipe.
func (s *Server) closeLog() {
	timer := time.NewTimer(2 * time.Second)
	defer timer.Stop()
	select {
	case <-s.read:
	case <-timer.C:
	}
	s.logr.Close()
	<-s.read
}

// stop kills sshd and everything it started, and logs sshd's output when
// the test failed.
func (s *Server) stop(t testing.TB, exited chan error) {
	s.kill(exited)
	if t.Failed() {
		t.Logf("sshd %s log:\n%s", s.Addr, s.Log())
	}
}

// kill kills sshd and every descendant (per-connection processes run in
// sessions of their own, so a process-group kill would miss them; sshd
// is frozen first so that it forks none meanwhile: proctree.KillTree),
// and waits for sshd.
func (s *Server) kill(exited chan error) {
	select {
	case <-exited: // reaped already: its pid may be another process's now
	default:
		proctree.KillTree(s.cmd.Process.Pid)
		<-exited
	}
	s.closeLog()
}
