package remote

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/hamaster/hamaster/errkind"
)

// hostKeyChecker checks host keys against one known_hosts file and keeps
// the explained error of a refused key. It serves one Dial.
type hostKeyChecker struct {
	file string
	cb   ssh.HostKeyCallback
	err  error // set by check when it refuses a key
}

func newHostKeyChecker(file string) (*hostKeyChecker, error) {
	st, err := os.Stat(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: known_hosts file %s does not exist (set --ssh-known-hosts, or add the master's host key to it)", file)
	case err != nil:
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: known_hosts file (--ssh-known-hosts): %w", err)
	case st.IsDir():
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: known_hosts file %s (--ssh-known-hosts) is a directory", file)
	}
	cb, err := knownhosts.New(file)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: read known_hosts file %s (--ssh-known-hosts): %w", file, err)
	}
	return &hostKeyChecker{file: file, cb: cb}, nil
}

// check is the ssh.HostKeyCallback. hostname is the address given to
// ssh.NewClientConn (host:port).
func (h *hostKeyChecker) check(hostname string, remote net.Addr, key ssh.PublicKey) error {
	err := h.cb(hostname, remote, key)
	if err == nil {
		return nil
	}
	fp := fingerprint(key)
	line := knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key)
	var (
		keyErr     *knownhosts.KeyError
		revokedErr *knownhosts.RevokedError
	)
	switch {
	case errors.As(err, &revokedErr):
		h.err = errkind.Errorf(errkind.FailedPrecondition,
			"ssh to %s: host key %s is marked @revoked in %s:%d; refusing to connect",
			hostname, fp, revokedErr.Revoked.Filename, revokedErr.Revoked.Line)
	case errors.As(err, &keyErr) && len(keyErr.Want) == 0:
		h.err = errkind.Errorf(errkind.FailedPrecondition,
			"ssh to %s: unknown host: %s has no entry for it; it presented host key %s. "+
				"Check that fingerprint on the master (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then add this line to %s:\n%s",
			hostname, h.file, fp, h.file, line)
	case errors.As(err, &keyErr):
		var known []string
		for _, k := range keyErr.Want {
			known = append(known, fmt.Sprintf("%s (%s:%d)", fingerprint(k.Key), k.Filename, k.Line))
		}
		h.err = errkind.Errorf(errkind.FailedPrecondition,
			"ssh to %s: HOST KEY MISMATCH: it presented host key %s but known_hosts has %s. "+
				"Either the master was rebuilt or someone is intercepting the connection. "+
				"If the new key is expected (check it on the master with ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), replace those lines with:\n%s",
			hostname, fp, strings.Join(known, ", "), line)
	default:
		h.err = errkind.Errorf(errkind.FailedPrecondition, "ssh to %s: host key %s: %w", hostname, fp, err)
	}
	return h.err
}

// algorithms returns the host key algorithms to offer for addr: those of
// the keys known_hosts holds for it, so that a server with several host
// keys presents the one we know rather than the one it prefers. nil (the
// library's default list) when none is known, for instance for an unknown
// host or one vouched for by an @cert-authority line.
func (h *hostKeyChecker) algorithms(addr string, remote net.Addr) []string {
	// Ask about a key that matches nothing: the error lists the known keys.
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil
	}
	probe, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil
	}
	var keyErr *knownhosts.KeyError
	if !errors.As(h.cb(addr, remote, probe), &keyErr) {
		return nil
	}
	var algos []string
	add := func(names ...string) {
		for _, n := range names {
			if !slices.Contains(algos, n) {
				algos = append(algos, n)
			}
		}
	}
	for _, k := range keyErr.Want {
		if t := k.Key.Type(); t == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		} else {
			add(t)
		}
	}
	return algos
}

// fingerprint is a key's type and SHA-256 fingerprint, as ssh-keygen -l
// shows it: "ssh-ed25519 SHA256:...".
func fingerprint(key ssh.PublicKey) string {
	if key == nil {
		return "(none)"
	}
	return key.Type() + " " + ssh.FingerprintSHA256(key)
}
