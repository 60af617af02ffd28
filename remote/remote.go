// Package remote runs commands on, uploads files to, and opens TCP tunnels
// through a master over SSH (golang.org/x/crypto/ssh).
//
// Its main use is reaching etcd on kube-up masters, where etcd listens on
// 127.0.0.1 only: Dial a healthy master that is not the one being changed,
// and hand Client.EtcdDialer to etcdmember.Config.DialContext so that every
// etcd connection is a direct-tcpip channel opened by that master's sshd.
//
// Host keys are always checked against a known_hosts file
// (golang.org/x/crypto/ssh/knownhosts: [host]:port entries, hashed hosts,
// @revoked and @cert-authority markers). An unknown host or a changed key is
// an errkind.FailedPrecondition error that names the key's fingerprint and
// the known_hosts line to add after checking it. The check is skipped only
// when the operator asks for it (Config.InsecureSkipHostKeyCheck, the
// --ssh-insecure-skip-host-key-check flag), and then every connection logs
// a warning naming the risk.
//
// A Client keeps its connection alive with a keepalive@openssh.com request
// every Config.KeepaliveInterval (15s), so that an idle tunnel through a NAT
// survives; when a keepalive goes unanswered for two intervals the
// connection is closed, so that DialContext, Run and Upload fail with an
// errkind.Unavailable error instead of hanging on a dead peer.
package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/hamaster/hamaster/errkind"
)

// Defaults applied by Dial to zero Config fields.
const (
	DefaultTimeout           = 10 * time.Second
	DefaultKeepaliveInterval = 15 * time.Second
	// DefaultPort is used when Config.Addr has no port.
	DefaultPort = "22"
)

// Config says how to reach a master's sshd.
type Config struct {
	// Addr is host:port of the master's sshd; without a port, 22.
	Addr string
	// User is the login name on the master.
	User string
	// KeyFile is an unencrypted private key file (any format
	// ssh.ParsePrivateKey reads: OpenSSH, PKCS#1, PKCS#8, SEC 1). When it is
	// set, the agent is not consulted. A passphrase-protected key must be
	// loaded into an agent instead.
	KeyFile string
	// AgentSocket is the unix socket of an SSH agent, used when KeyFile is
	// "". The library never reads $SSH_AUTH_SOCK itself: the CLI passes it
	// here. With neither KeyFile nor AgentSocket, Dial fails with an
	// errkind.InvalidArgument error naming --ssh-key.
	AgentSocket string
	// KnownHostsFile is the OpenSSH known_hosts file the host key is checked
	// against; "" means ~/.ssh/known_hosts. A missing file is an
	// errkind.InvalidArgument error naming --ssh-known-hosts. Ignored with
	// InsecureSkipHostKeyCheck.
	KnownHostsFile string
	// InsecureSkipHostKeyCheck accepts any host key. Anyone who can
	// intercept the connection can then read and change everything sent
	// over it, etcd traffic and uploaded files included; every Dial logs a
	// warning saying so.
	InsecureSkipHostKeyCheck bool
	// Timeout bounds the TCP dial plus the SSH handshake and
	// authentication; 0 means DefaultTimeout.
	Timeout time.Duration
	// KeepaliveInterval is how often an idle or busy connection is probed
	// with a keepalive@openssh.com request; a probe unanswered for two
	// intervals closes the connection. 0 means DefaultKeepaliveInterval; a
	// negative value turns keepalives off.
	KeepaliveInterval time.Duration
	// Logger receives connection events (Debug), keepalive failures and the
	// insecure-mode warning (Warn); nil discards them.
	Logger *slog.Logger
	// Via, when set, is a jump host (ssh -J): the TCP connection to Addr
	// is opened by Via's sshd, so Addr may be an address only Via can
	// reach (a master's private IP behind a bastion). The host key of Addr
	// is checked as usual.
	Via *Client
	// Sudo runs every command (Run, Upload, and the kill of a cancelled
	// command) through `sudo -n -- sh -c CMD`: for a User other than root,
	// which is how most hosts let operators in. sudo must not ask for a
	// password (-n makes it fail instead of waiting): the first command
	// that fails before one succeeded runs CheckSudo, whose error says so
	// (that command did not run). Tunnels need no privilege and are
	// unchanged.
	Sudo bool
}

// withDefaults returns cfg with zero fields filled in. It reads the home
// directory only when KnownHostsFile is needed and empty.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.KeepaliveInterval == 0 {
		cfg.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Addr != "" {
		if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
			// No port (or a bare IPv6 address): use 22.
			cfg.Addr = net.JoinHostPort(cfg.Addr, DefaultPort)
		}
	}
	if cfg.KnownHostsFile == "" && !cfg.InsecureSkipHostKeyCheck {
		home, err := os.UserHomeDir()
		if err != nil {
			return cfg, errkind.Errorf(errkind.InvalidArgument, "ssh config: no --ssh-known-hosts given and no home directory for ~/.ssh/known_hosts: %w", err)
		}
		cfg.KnownHostsFile = filepath.Join(home, ".ssh", "known_hosts")
	}
	return cfg, nil
}

// validate checks the fields that need no I/O.
func (cfg Config) validate() error {
	host, port, err := net.SplitHostPort(cfg.Addr)
	switch {
	case cfg.Addr == "":
		return errkind.Errorf(errkind.InvalidArgument, "ssh config: no address of the master's sshd")
	case err != nil || host == "" || port == "":
		return errkind.Errorf(errkind.InvalidArgument, "ssh config: address %q is not host:port", cfg.Addr)
	case cfg.User == "":
		return errkind.Errorf(errkind.InvalidArgument, "ssh config: no user for %s", cfg.Addr)
	case cfg.Timeout < 0:
		return errkind.Errorf(errkind.InvalidArgument, "ssh config: negative timeout %s", cfg.Timeout)
	}
	return nil
}

// Client is an SSH connection to one master. It is safe for concurrent use;
// Close it when done.
type Client struct {
	addr string // host:port
	user string
	sudo bool
	// sudoOK: a command run through sudo has succeeded (runChecked).
	sudoOK atomic.Bool
	log    *slog.Logger
	ssh    *ssh.Client

	done    chan struct{}  // closed when the connection has ended
	closing chan struct{}  // closed when Close is called
	wg      sync.WaitGroup // the client's goroutines; Close waits for them

	mu     sync.Mutex
	ended  error // why the connection ended; nil while it is up
	closed bool  // Close was called

	closeOnce sync.Once
}

// errClosed is the reason recorded when the caller closes the client.
var errClosed = errors.New("ssh client closed")

// Dial connects to cfg.Addr, checks its host key and authenticates. Errors:
// errkind.InvalidArgument for configuration problems (missing key file
// naming --ssh-key, missing known_hosts naming --ssh-known-hosts, a
// passphrase-protected key); errkind.FailedPrecondition for an unknown,
// changed or revoked host key, with the fingerprint and the known_hosts line
// to add; an error naming the user and the key (or agent) when the server
// refuses authentication; errkind.Unavailable when sshd cannot be reached
// or the handshake does not finish within cfg.Timeout.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	auth, err := newAuth(cfg)
	if err != nil {
		return nil, err
	}
	defer auth.close()
	var hk *hostKeyChecker
	if !cfg.InsecureSkipHostKeyCheck {
		if hk, err = newHostKeyChecker(cfg.KnownHostsFile); err != nil {
			return nil, err
		}
	}

	dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var conn net.Conn
	if cfg.Via != nil {
		conn, err = cfg.Via.DialContext(dctx, "tcp", cfg.Addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(dctx, "tcp", cfg.Addr)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh to %s: %w", cfg.Addr, ctx.Err())
		}
		return nil, errkind.Errorf(errkind.Unavailable, "ssh to %s: connect to sshd: %w", cfg.Addr, err)
	}

	cc := &ssh.ClientConfig{
		User: cfg.User,
		Auth: []ssh.AuthMethod{auth.method},
	}
	var presented ssh.PublicKey
	if hk != nil {
		cc.HostKeyCallback = hk.check
		cc.HostKeyAlgorithms = hk.algorithms(cfg.Addr, conn.RemoteAddr())
	} else {
		cc.HostKeyCallback = func(_ string, _ net.Addr, key ssh.PublicKey) error {
			presented = key
			return nil
		}
	}

	// The handshake has no context of its own: end it by closing the
	// connection when dctx ends.
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(conn, cfg.Addr, cc)
	if !stop() {
		// dctx ended: the connection is closed or about to be.
		if err == nil {
			sc.Close()
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh to %s: %w", cfg.Addr, ctx.Err())
		}
		return nil, errkind.Errorf(errkind.Unavailable, "ssh to %s: connection and handshake did not finish within %s", cfg.Addr, cfg.Timeout)
	}
	if err != nil {
		conn.Close()
		switch {
		case hk != nil && hk.err != nil:
			return nil, hk.err
		case isAuthFailure(err):
			return nil, fmt.Errorf("ssh to %s: server refused %s as user %q (is its public key in that user's authorized_keys?): %w", cfg.Addr, auth.describe, cfg.User, err)
		default:
			return nil, errkind.Errorf(errkind.Unavailable, "ssh to %s: handshake: %w", cfg.Addr, err)
		}
	}

	log := cfg.Logger.With("ssh", cfg.Addr)
	if hk == nil {
		log.Warn("SSH host key NOT checked (--ssh-insecure-skip-host-key-check): anyone who can intercept this connection can read and change everything sent over it, etcd traffic and uploaded files included",
			"user", cfg.User, "host_key", fingerprint(presented))
	}
	c := &Client{
		addr:    cfg.Addr,
		user:    cfg.User,
		sudo:    cfg.Sudo,
		log:     log,
		ssh:     ssh.NewClient(sc, chans, reqs),
		done:    make(chan struct{}),
		closing: make(chan struct{}),
	}
	c.wg.Go(c.watch)
	if cfg.KeepaliveInterval > 0 {
		c.wg.Go(func() { c.keepalive(cfg.KeepaliveInterval) })
	}
	log.Debug("ssh connected", "user", cfg.User, "auth", auth.describe)
	return c, nil
}

// Addr is the host:port the client is connected to.
func (c *Client) Addr() string { return c.addr }

// Close closes the connection and every tunnel and session on it. Closing
// a client whose connection has already ended returns nil.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		ended := c.ended != nil
		c.mu.Unlock()
		close(c.closing)
		err = c.ssh.Close()
		c.wg.Wait()
		if ended || errors.Is(err, net.ErrClosed) {
			err = nil
		}
	})
	if err != nil {
		return fmt.Errorf("close ssh connection to %s: %w", c.addr, err)
	}
	return nil
}

// goTracked runs f in a goroutine that Close waits for, unless Close has
// been called; it reports whether f was started.
func (c *Client) goTracked(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Go(f)
	return true
}

// watch records why the connection ended and closes c.done.
func (c *Client) watch() {
	err := c.ssh.Wait()
	c.mu.Lock()
	switch {
	case c.closed:
		c.ended = errClosed
	case c.ended == nil:
		if err == nil {
			err = errors.New("closed by the server")
		}
		c.ended = fmt.Errorf("connection lost: %w", err)
		c.log.Warn("ssh connection lost", "err", err)
	}
	c.mu.Unlock()
	close(c.done)
}

// keepalive probes the server every interval and closes the connection when
// a probe is unanswered for two intervals (or fails), so that a dead peer
// makes every later call fail instead of hang.
func (c *Client) keepalive(interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
		}
		reply := make(chan error, 1)
		go func() {
			// OpenSSH answers an unknown global request with a failure,
			// which is an answer all the same.
			_, _, err := c.ssh.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		timer := time.NewTimer(2 * interval)
		var dead error
		select {
		case <-c.done:
		case err := <-reply:
			if err != nil {
				dead = fmt.Errorf("keepalive failed: %w", err)
			}
		case <-timer.C:
			dead = fmt.Errorf("no answer to a keepalive within %s", 2*interval)
		}
		timer.Stop()
		if dead != nil {
			c.mu.Lock()
			if c.ended == nil && !c.closed {
				c.ended = dead
				c.log.Warn("ssh connection dead, closing it", "err", dead)
			}
			c.mu.Unlock()
			c.ssh.Close()
			return
		}
	}
}

// Ping asks the server for an answer on the connection itself (a global
// keepalive request: no session, so no login's shell setup, a round trip
// only), giving up when ctx ends. It is how a caller that kept what it
// last read on the host checks, cheaply, that the host still answers.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.endErr(); err != nil {
		return err
	}
	reply := make(chan error, 1)
	go func() {
		// OpenSSH answers an unknown global request with a failure,
		// which is an answer all the same.
		_, _, err := c.ssh.SendRequest("keepalive@openssh.com", true, nil)
		reply <- err
	}()
	select {
	case err := <-reply:
		if err != nil {
			if end := c.waitEnd(time.Second); end != nil {
				return end
			}
			return errkind.Errorf(errkind.Unavailable, "ping %s: %w", c.addr, err)
		}
		return nil
	case <-ctx.Done():
		return errkind.Errorf(errkind.Unavailable, "ping %s: no answer: %w", c.addr, ctx.Err())
	}
}

// waitEnd is endErr after waiting up to d for the connection to end. It
// serves calls that failed in a way that only an ending connection causes
// (a channel closed under them), to report why it ended: the reason is
// recorded a moment after the channels are dropped.
func (c *Client) waitEnd(d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-c.done:
	case <-timer.C:
	}
	return c.endErr()
}

// Err says why the connection has ended (an errkind.Unavailable error),
// nil while it is up: a failed call on a live connection (a command's
// context ended, a tunnel the server refused) leaves it up for the
// sessions still running on it.
func (c *Client) Err() error { return c.endErr() }

// endErr says why the connection has ended, as an errkind.Unavailable
// error, or returns nil while it is up.
func (c *Client) endErr() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended == errClosed {
		return errkind.Errorf(errkind.Unavailable, "ssh connection to %s: %w", c.addr, errClosed)
	}
	return errkind.Errorf(errkind.Unavailable, "ssh connection to %s ended: %w", c.addr, c.ended)
}
