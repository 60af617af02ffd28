package remote_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/loopbacktest"
	"github.com/hamaster/hamaster/internal/syncbuf"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/remote/sshtest"
)

// testTimeout bounds each test's calls: a hang guard. A test makes up to
// a dozen logins of a second each (slowlogin) through the user's own shell
// setup, on a machine where other race-instrumented packages run beside it.
const testTimeout = time.Minute

// config is a Config that reaches s with its client key and known_hosts.
func config(s *sshtest.Server) remote.Config {
	return remote.Config{
		Addr:           s.Addr,
		User:           s.User,
		KeyFile:        s.ClientKeyFile,
		KnownHostsFile: s.KnownHostsFile,
		Timeout:        5 * time.Second,
	}
}

// dial connects with cfg and closes the client when the test ends.
func dial(ctx context.Context, t *testing.T, cfg remote.Config) *remote.Client {
	t.Helper()
	c, err := remote.Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// startAgent serves an in-process SSH agent holding keys on a unix socket
// and returns the socket's path.
func startAgent(t *testing.T, keys ...ed25519.PrivateKey) string {
	t.Helper()
	kr := agent.NewKeyring()
	for _, k := range keys {
		if err := kr.Add(agent.AddedKey{PrivateKey: k}); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, func(c net.Conn) { _ = agent.ServeAgent(kr, c) })
	return sock
}

// serve hands each connection accepted on l to handle, in a goroutine
// of its own, and closes it after; the test's end closes l and waits for
// the handlers.
func serve(t *testing.T, l net.Listener, handle func(net.Conn)) {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
}

// newLogger logs everything as text to w.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestDial(t *testing.T) {
	t.Parallel()
	s := sshtest.Start(t, sshtest.Options{})
	dir := t.TempDir()
	edKey, ecKey := s.HostKeys[0], s.HostKeys[1]
	_, otherHostKey := sshtest.NewKey(t, dir, "other_host_key")
	otherHostPub := sshtest.PublicKey(t, otherHostKey)
	wrongKeyFile, _ := sshtest.NewKey(t, dir, "wrong_key")
	// Encrypting a key (bcrypt_pbkdf) takes seconds under -race: use a
	// stored one.
	lockedKeyFile := filepath.Join("testdata", "passphrase_ed25519")
	_, strangerKey := sshtest.NewKey(t, dir, "stranger_key")
	keyAgent := startAgent(t, s.ClientKey)
	strangerAgent := startAgent(t, strangerKey)

	hashed := knownhosts.Line([]string{knownhosts.HashHostname(knownhosts.Normalize(s.Addr))}, edKey)
	revoked := "@revoked * " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(edKey)))

	tests := []struct {
		name   string
		mutate func(cfg *remote.Config)
		// wantErr: Dial fails; wantKind: and the error is of this kind
		// (nil: of none of errkind's kinds); wantIn: the message holds
		// each string.
		wantErr  bool
		wantKind error
		wantIn   []string
	}{
		{name: "known host", mutate: func(*remote.Config) {}},
		{name: "hashed known_hosts entry", mutate: func(cfg *remote.Config) {
			cfg.KnownHostsFile = s.KnownHosts(t, s.Addr, nil, hashed)
		}},
		{name: "only the ECDSA host key known", mutate: func(cfg *remote.Config) {
			cfg.KnownHostsFile = s.KnownHosts(t, s.Addr, []ssh.PublicKey{ecKey})
		}},
		{name: "agent holding the key", mutate: func(cfg *remote.Config) {
			cfg.KeyFile, cfg.AgentSocket = "", keyAgent
		}},
		{name: "key file wins over the agent", mutate: func(cfg *remote.Config) {
			cfg.AgentSocket = strangerAgent
		}},
		{name: "insecure without known_hosts", mutate: func(cfg *remote.Config) {
			cfg.InsecureSkipHostKeyCheck = true
			cfg.KnownHostsFile = filepath.Join(dir, "absent")
		}},
		{
			name: "host key mismatch",
			mutate: func(cfg *remote.Config) {
				cfg.KnownHostsFile = s.KnownHosts(t, s.Addr, []ssh.PublicKey{otherHostPub})
			},
			wantErr: true, wantKind: errkind.FailedPrecondition,
			wantIn: []string{"MISMATCH", ssh.FingerprintSHA256(edKey), ssh.FingerprintSHA256(otherHostPub),
				knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, edKey)},
		},
		{
			name: "insecure despite a mismatch",
			mutate: func(cfg *remote.Config) {
				cfg.InsecureSkipHostKeyCheck = true
				cfg.KnownHostsFile = s.KnownHosts(t, s.Addr, []ssh.PublicKey{otherHostPub})
			},
		},
		{
			name: "unknown host",
			mutate: func(cfg *remote.Config) {
				cfg.KnownHostsFile = s.KnownHosts(t, "127.0.0.1:1", s.HostKeys)
			},
			wantErr: true, wantKind: errkind.FailedPrecondition,
			wantIn: []string{"unknown host", "[" + strings.Replace(s.Addr, ":", "]:", 1) + " "},
		},
		{
			name: "revoked host key",
			mutate: func(cfg *remote.Config) {
				cfg.KnownHostsFile = s.KnownHosts(t, s.Addr, s.HostKeys, revoked)
			},
			wantErr: true, wantKind: errkind.FailedPrecondition,
			wantIn: []string{"@revoked", ssh.FingerprintSHA256(edKey)},
		},
		{
			name:    "missing known_hosts",
			mutate:  func(cfg *remote.Config) { cfg.KnownHostsFile = filepath.Join(dir, "absent") },
			wantErr: true, wantKind: errkind.InvalidArgument,
			wantIn: []string{"--ssh-known-hosts", filepath.Join(dir, "absent")},
		},
		{
			name:    "missing key file",
			mutate:  func(cfg *remote.Config) { cfg.KeyFile = filepath.Join(dir, "absent") },
			wantErr: true, wantKind: errkind.InvalidArgument,
			wantIn: []string{"--ssh-key", filepath.Join(dir, "absent")},
		},
		{
			name:    "neither key file nor agent",
			mutate:  func(cfg *remote.Config) { cfg.KeyFile = "" },
			wantErr: true, wantKind: errkind.InvalidArgument,
			wantIn: []string{"--ssh-key", "SSH_AUTH_SOCK"},
		},
		{
			name:    "passphrase-protected key",
			mutate:  func(cfg *remote.Config) { cfg.KeyFile = lockedKeyFile },
			wantErr: true, wantKind: errkind.InvalidArgument,
			wantIn: []string{"--ssh-key", "passphrase", lockedKeyFile},
		},
		{
			name:    "key not authorized",
			mutate:  func(cfg *remote.Config) { cfg.KeyFile = wrongKeyFile },
			wantErr: true,
			wantIn:  []string{"refused", wrongKeyFile, `"` + s.User + `"`, "authorized_keys"},
		},
		{
			name:    "agent without the key",
			mutate:  func(cfg *remote.Config) { cfg.KeyFile, cfg.AgentSocket = "", strangerAgent },
			wantErr: true,
			wantIn:  []string{"refused", "SSH agent at " + strangerAgent, `"` + s.User + `"`},
		},
		{
			name:    "unreachable agent",
			mutate:  func(cfg *remote.Config) { cfg.KeyFile, cfg.AgentSocket = "", filepath.Join(dir, "no.sock") },
			wantErr: true, wantKind: errkind.InvalidArgument,
			wantIn: []string{"SSH agent", "--ssh-key"},
		},
		{
			name:    "wrong user",
			mutate:  func(cfg *remote.Config) { cfg.User = "hamaster-no-such-user" },
			wantErr: true,
			wantIn:  []string{"refused", `"hamaster-no-such-user"`},
		},
		{
			name:    "no sshd there",
			mutate:  func(cfg *remote.Config) { cfg.Addr = loopbacktest.Addr(t) },
			wantErr: true, wantKind: errkind.Unavailable,
			wantIn: []string{"connect to sshd"},
		},
		{
			name:    "no user",
			mutate:  func(cfg *remote.Config) { cfg.User = "" },
			wantErr: true, wantKind: errkind.InvalidArgument,
		},
	}
	kinds := []error{errkind.NotFound, errkind.AlreadyExists, errkind.FailedPrecondition, errkind.Unavailable, errkind.InvalidArgument}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
			defer cancel()
			var logs syncbuf.Buffer
			cfg := config(s)
			cfg.Logger = newLogger(&logs)
			tt.mutate(&cfg)

			c, err := remote.Dial(ctx, cfg)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				defer c.Close()
				out, _, err := c.Run(ctx, "echo ok")
				if err != nil || string(out) != "ok\n" {
					t.Fatalf("Run after Dial: %q, %v", out, err)
				}
				warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "NOT checked") &&
					strings.Contains(logs.String(), "intercept") && strings.Contains(logs.String(), "SHA256:")
				if warned != cfg.InsecureSkipHostKeyCheck {
					t.Errorf("insecure %v, but the log warns %v:\n%s", cfg.InsecureSkipHostKeyCheck, warned, logs.String())
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded, want an error")
			}
			for _, k := range kinds {
				if got, want := errors.Is(err, k), k == tt.wantKind; got != want {
					t.Errorf("errors.Is(err, %v) = %v, want %v; err: %v", k, got, want, err)
				}
			}
			for _, w := range tt.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %v", w, err)
				}
			}
			if tt.name == "unknown host" && !mentionsOneOf(err, s.HostKeys) {
				t.Errorf("error names neither host key's fingerprint and line: %v", err)
			}
		})
	}
}

// mentionsOneOf reports whether err names one of keys by fingerprint and
// by its known_hosts line.
func mentionsOneOf(err error, keys []ssh.PublicKey) bool {
	for _, k := range keys {
		if strings.Contains(err.Error(), ssh.FingerprintSHA256(k)) &&
			strings.Contains(err.Error(), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))) {
			return true
		}
	}
	return false
}

func TestDialContextCancelled(t *testing.T) {
	t.Parallel()
	// A listener that never speaks SSH: the handshake waits for the
	// server's banner until ctx ends.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, l, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c) // until the client goes away
	})
	s := sshtest.Start(t, sshtest.Options{})
	for _, tt := range []struct {
		name     string
		timeout  time.Duration // Config.Timeout
		ctxLimit time.Duration // ctx deadline
		wantKind error
		wantCtx  bool
	}{
		{name: "config timeout", timeout: 200 * time.Millisecond, ctxLimit: testTimeout, wantKind: errkind.Unavailable},
		{name: "ctx deadline", timeout: testTimeout, ctxLimit: 200 * time.Millisecond, wantCtx: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), tt.ctxLimit)
			defer cancel()
			cfg := config(s)
			cfg.Addr = l.Addr().String()
			cfg.KnownHostsFile = s.KnownHosts(t, cfg.Addr, s.HostKeys)
			cfg.Timeout = tt.timeout
			start := time.Now()
			c, err := remote.Dial(ctx, cfg)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded against a silent server")
			}
			// Which limit ended it is the error's kind, below; the time
			// is only a hang guard (200 ms expected, 25 x that allowed).
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("hang guard: Dial failed only after %s (its limit is 200 ms)", took)
			}
			if tt.wantKind != nil && !errors.Is(err, tt.wantKind) {
				t.Errorf("err = %v, want kind %v", err, tt.wantKind)
			}
			if tt.wantCtx != errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want ctx error %v", err, tt.wantCtx)
			}
		})
	}
}
