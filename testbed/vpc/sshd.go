package vpc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WriteSSHDConfig writes the sshd_config of a VM's sshd into sshDir (the
// directory that holds its host key, ssh_host_ed25519_key, and one
// authorized_keys file per user, as a guest agent writes them) and makes
// sshd's privilege separation directory (systemd makes it on a VM). The
// sshd listens on port on every address of the VM; extra lines are
// appended as they are. It returns the config's path, for sshd -f.
func WriteSSHDConfig(sshDir string, port int, extra ...string) (string, error) {
	conf := []string{
		"ListenAddress 0.0.0.0:" + strconv.Itoa(port),
		"HostKey " + filepath.Join(sshDir, "ssh_host_ed25519_key"),
		"PidFile " + filepath.Join(sshDir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(sshDir, "authorized_keys", "%u"),
		"StrictModes no", "UsePAM no", "AllowTcpForwarding yes", "PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
		"AllowAgentForwarding no", "X11Forwarding no", "PrintMotd no", "PrintLastLog no", "UseDNS no",
		"MaxStartups 100", "MaxSessions 100", "LogLevel VERBOSE",
	}
	conf = append(conf, extra...)
	cfg := filepath.Join(sshDir, "sshd_config")
	if err := os.WriteFile(cfg, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("sshd config: %w", err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return "", fmt.Errorf("sshd privilege separation dir: %w", err)
	}
	return cfg, nil
}
