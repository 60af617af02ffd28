package remote

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/hamaster/hamaster/errkind"
)

// auth is the one authentication method of a Dial and what to call it in
// messages.
type auth struct {
	method   ssh.AuthMethod
	describe string   // "key /path (ssh-ed25519 SHA256:...)" or "the keys of the SSH agent at /sock"
	conn     net.Conn // the agent connection, closed after the handshake
}

func (a *auth) close() {
	if a.conn != nil {
		a.conn.Close()
	}
}

// newAuth loads cfg.KeyFile, or connects to the agent at cfg.AgentSocket.
func newAuth(cfg Config) (*auth, error) {
	if cfg.KeyFile != "" {
		return keyFileAuth(cfg.KeyFile)
	}
	if cfg.AgentSocket == "" {
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: no private key: set --ssh-key, or run an SSH agent (SSH_AUTH_SOCK) holding the key")
	}
	conn, err := net.Dial("unix", cfg.AgentSocket)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: no --ssh-key given and the SSH agent at %s (SSH_AUTH_SOCK) is unreachable: %w", cfg.AgentSocket, err)
	}
	ag := agent.NewClient(conn)
	return &auth{
		method:   ssh.PublicKeysCallback(ag.Signers),
		describe: "the keys of the SSH agent at " + cfg.AgentSocket,
		conn:     conn,
	}, nil
}

func keyFileAuth(file string) (*auth, error) {
	pem, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: private key file %s (--ssh-key) does not exist", file)
	case err != nil:
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: read private key (--ssh-key): %w", err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: private key %s (--ssh-key) is passphrase-protected: load it into an SSH agent (ssh-add) and leave --ssh-key unset", file)
	case err != nil:
		return nil, errkind.Errorf(errkind.InvalidArgument, "ssh config: private key %s (--ssh-key): %w", file, err)
	}
	return &auth{
		method:   ssh.PublicKeys(signer),
		describe: fmt.Sprintf("key %s (%s)", file, fingerprint(signer.PublicKey())),
	}, nil
}

// isAuthFailure reports whether a handshake error is the server refusing
// every key offered. x/crypto/ssh has no typed error for it.
func isAuthFailure(err error) bool {
	return strings.Contains(err.Error(), "ssh: unable to authenticate")
}
