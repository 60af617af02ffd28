package metallab

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/hamaster/hamaster/testbed/slowlogin"
)

// LoginUser is the lab's login on every host, as most hosts let an
// operator in: not root, with passwordless sudo (a sudoers.d entry, as
// cloud images make for their default user), and every session slow to
// start (Options.LoginDelay). The inventory names it, so hamaster runs
// every command through sudo. Root logins stay open for the tests'
// own inspection (Lab.Dial).
const LoginUser = "labop"

// Login IDs are taken from this range, the first one no user or group of
// the machine has: the same on every host of the lab.
const (
	minLoginID = 60100
	maxLoginID = 60999
)

// sudoersFile is the host's sudoers.d entry giving LoginUser root.
const sudoersFile = "hamaster-metallab"

// loginDelay is the sessions' start-up delay o asks for: 0 means
// HAMASTER_SSH_LOGIN_DELAY's (a second when unset), negative none.
func loginDelay(o Options) (time.Duration, error) {
	switch {
	case o.LoginDelay < 0:
		return 0, nil
	case o.LoginDelay > 0:
		return o.LoginDelay, nil
	}
	return slowlogin.FromEnv()
}

// freeLoginID is the first id in [minLoginID, maxLoginID] that no user
// and no group of the machine has (/etc/passwd, /etc/group).
func freeLoginID() (int, error) {
	taken := map[int]bool{}
	for _, f := range []string{"/etc/passwd", "/etc/group"} {
		lines, err := readLines(f)
		if err != nil {
			return 0, err
		}
		for _, l := range lines {
			if fields := strings.Split(l, ":"); len(fields) > 2 {
				if id, err := strconv.Atoi(fields[2]); err == nil {
					taken[id] = true
				}
			}
		}
	}
	for id := minLoginID; id <= maxLoginID; id++ {
		if !taken[id] {
			return id, nil
		}
	}
	return 0, fmt.Errorf("metallab: no free user id from %d to %d for the login user %s", minLoginID, maxLoginID, LoginUser)
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metallab: %w", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metallab: read %s: %w", path, err)
	}
	return lines, nil
}

// loginMounts writes host h's own /etc/passwd, /etc/group and
// /etc/shadow (the machine's, plus LoginUser with id), /home (LoginUser's,
// letting clientPub in) and
// /etc/sudoers.d (the machine's entries, plus LoginUser's unless
// sudo is false), and returns the bind mounts that put them in place in
// the host's mount namespace: source, target pairs for
// kubeadmhost.HostScript.
func loginMounts(h *Host, id int, sudo bool, clientPub ssh.PublicKey) ([]string, error) {
	// The host's own /home (the machine's stays out of sight): the home
	// directory and its authorized_keys are reached by the path inside
	// the host, whatever the modes of the directories above h.Dir.
	homes := filepath.Join(h.Dir, "home")
	sshDir := filepath.Join(homes, LoginUser, ".ssh")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{homes, 0o755}, {filepath.Join(homes, LoginUser), 0o755}, {sshDir, 0o700}} {
		if err := os.Mkdir(d.path, d.mode); err != nil && !os.IsExist(err) {
			return nil, fmt.Errorf("metallab: %s: %w", h.Name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(sshDir, "authorized_keys"), ssh.MarshalAuthorizedKey(clientPub), 0o600); err != nil {
		return nil, fmt.Errorf("metallab: %s: %w", h.Name, err)
	}
	for _, p := range []string{filepath.Join(homes, LoginUser), sshDir, filepath.Join(sshDir, "authorized_keys")} {
		if err := os.Chown(p, id, id); err != nil {
			return nil, fmt.Errorf("metallab: %s: %w", h.Name, err)
		}
	}
	home := "/home/" + LoginUser
	etc := filepath.Join(h.Dir, "etc")
	sudoers := filepath.Join(etc, "sudoers.d")
	if err := os.MkdirAll(sudoers, 0o755); err != nil {
		return nil, fmt.Errorf("metallab: %s: %w", h.Name, err)
	}
	// The shadow entry's "*": no password logs in (keys only), and the
	// account is not locked (sudo's PAM account check refuses a user
	// without an entry: "account validation failure").
	add := []struct {
		name, line string
		mode       os.FileMode
	}{
		{"passwd", fmt.Sprintf("%s:x:%d:%d:hamaster lab operator:%s:/bin/bash", LoginUser, id, id, home), 0o644},
		{"group", fmt.Sprintf("%s:x:%d:", LoginUser, id), 0o644},
		{"shadow", LoginUser + ":*:20000:0:99999:7:::", 0o600},
	}
	mounts := []string{homes, "/home"}
	for _, a := range add {
		lines, err := readLines("/etc/" + a.name)
		if err != nil {
			return nil, err
		}
		lines = append(lines, a.line)
		src := filepath.Join(etc, a.name)
		if err := os.WriteFile(src, []byte(strings.Join(lines, "\n")+"\n"), a.mode); err != nil {
			return nil, fmt.Errorf("metallab: %s: %w", h.Name, err)
		}
		mounts = append(mounts, src, "/etc/"+a.name)
	}
	// The machine's own entries stay (sudo reads every file there).
	entries, err := os.ReadDir("/etc/sudoers.d")
	if err != nil {
		return nil, fmt.Errorf("metallab: %w (is sudo installed? apt-get install sudo)", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/etc/sudoers.d", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("metallab: %w", err)
		}
		if err := os.WriteFile(filepath.Join(sudoers, e.Name()), b, 0o440); err != nil {
			return nil, fmt.Errorf("metallab: %s: %w", h.Name, err)
		}
	}
	entry := filepath.Join(sudoers, sudoersFile)
	if sudo {
		line := "# metallab: the lab's login user may do anything as root, without a password.\n" + LoginUser + " ALL=(ALL:ALL) NOPASSWD: ALL\n"
		if err := os.WriteFile(entry, []byte(line), 0o440); err != nil {
			return nil, fmt.Errorf("metallab: %s: %w", h.Name, err)
		}
	} else if err := os.Remove(entry); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("metallab: %s: %w", h.Name, err)
	}
	return append(mounts, sudoers, "/etc/sudoers.d"), nil
}
