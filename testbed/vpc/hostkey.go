package vpc

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"

	"golang.org/x/crypto/ssh"
)

// HostKey loads a VM's sshd host key from path (OpenSSH format), or makes
// an ed25519 one there: a VM keeps its host key across reboots of the same
// instance, as a cloud VM's disk keeps /etc/ssh. It returns the public
// key, for the operator's known_hosts.
func HostKey(path, comment string) (ssh.PublicKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("host key %s: %w", path, err)
		}
		return s.PublicKey(), nil
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, err
	}
	return s.PublicKey(), nil
}
