package kubeadm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hamaster/hamaster/internal/wait"
)

func TestSetAPIServerExtraArgs(t *testing.T) {
	t.Parallel()
	doc := fixture(t, "cluster-configuration-v1.33.13.yaml")
	out, changed, err := SetAPIServerExtraArgs(doc, []string{"--audit-log-maxage=7", "--v=2"})
	if err != nil || !changed {
		t.Fatalf("SetAPIServerExtraArgs = %v, %v", changed, err)
	}
	var c struct {
		APIServer struct {
			ExtraArgs []struct{ Name, Value string } `yaml:"extraArgs"`
		} `yaml:"apiServer"`
		KubernetesVersion string `yaml:"kubernetesVersion"`
	}
	if err := yaml.Unmarshal(out, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.APIServer.ExtraArgs) != 2 || c.APIServer.ExtraArgs[0].Name != "audit-log-maxage" || c.APIServer.ExtraArgs[0].Value != "7" || c.APIServer.ExtraArgs[1].Name != "v" {
		t.Errorf("extraArgs = %+v", c.APIServer.ExtraArgs)
	}
	if c.KubernetesVersion == "" || !strings.Contains(string(out), "imageRepository: registry.k8s.io") {
		t.Errorf("other fields lost:\n%s", out)
	}
	// Idempotent; a changed value replaces the old one.
	if again, changed, err := SetAPIServerExtraArgs(out, []string{"--v=2"}); err != nil || changed || string(again) != string(out) {
		t.Errorf("again: changed=%v err=%v", changed, err)
	}
	moved, changed, err := SetAPIServerExtraArgs(out, []string{"--v=4"})
	if err != nil || !changed || strings.Count(string(moved), "name: v\n") != 1 || !strings.Contains(string(moved), `value: "4"`) {
		t.Errorf("--v=4: changed=%v err=%v\n%s", changed, err, moved)
	}
	// v1beta3 keeps extraArgs as a map.
	b3 := "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nkubernetesVersion: v1.30.0\n"
	out3, _, err := SetAPIServerExtraArgs([]byte(b3), []string{"--v=2"})
	if err != nil || !strings.Contains(string(out3), "extraArgs:\n    v: \"2\"") {
		t.Errorf("v1beta3: %v\n%s", err, out3)
	}
	for _, bad := range []string{"v=2", "--v", "--=1"} {
		if _, _, err := SetAPIServerExtraArgs(doc, []string{bad}); err == nil {
			t.Errorf("flag %q: no error", bad)
		}
	}
}

func TestInstallCommandFor(t *testing.T) {
	t.Parallel()
	got, err := UpgradeOptions{}.InstallCommandFor("v1.34.4", "kubelet", "kubectl")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/core:/stable:/v1.34/deb/", "apt-mark unhold kubelet kubectl", "apt-get install -y --allow-downgrades kubelet='1.34.4-*' kubectl='1.34.4-*'", "apt-mark hold kubelet kubectl"} {
		if !strings.Contains(got, want) {
			t.Errorf("default install command lacks %q:\n%s", want, got)
		}
	}
	lab := UpgradeOptionsFromEnv(envMap{EnvInstallCommand: "hamaster-lab-install {version} {packages}", EnvIgnorePreflightErrors: "CreateJob, Foo", EnvRestartKubeletCommand: "lab-restart kubelet"}.get)
	if got, _ := lab.InstallCommandFor("v1.33.13", "kubeadm"); got != "hamaster-lab-install v1.33.13 kubeadm" {
		t.Errorf("lab install command = %q", got)
	}
	if lab.RestartKubeletCommand != "lab-restart kubelet" {
		t.Errorf("RestartKubeletCommand = %q", lab.RestartKubeletCommand)
	}
	if strings.Join(lab.IgnorePreflightErrors, ",") != "CreateJob,Foo" {
		t.Errorf("IgnorePreflightErrors = %q", lab.IgnorePreflightErrors)
	}
	if _, err := lab.InstallCommandFor("1.34", "kubeadm"); err == nil {
		t.Error("version 1.34: no error")
	}
}

type envMap map[string]string

func (m envMap) get(k string) string { return m[k] }

func TestExitsSince(t *testing.T) {
	t.Parallel()
	dir := "/var/log/pods/kube-system_kube-apiserver-m1_"
	before := map[string]podLog{dir + "old/kube-apiserver/0.log": {size: 100, age: 5 * time.Second}, dir + "old/kube-apiserver/1.log": {size: 100}, dir + "new/kube-apiserver/1.log": {size: 10, age: time.Hour}}
	oldDir := currentDir(before)
	if oldDir != dir+"old/kube-apiserver" {
		t.Fatalf("currentDir = %q", oldDir)
	}
	for _, tc := range []struct {
		name    string
		now     map[string]podLog
		started bool
		exits   int
		last    string
	}{
		{"nothing new", before, false, 0, ""},
		{"the old one logging as it stops", map[string]podLog{dir + "old/kube-apiserver/1.log": {size: 200}}, false, 0, ""},
		{"the new pod running", map[string]podLog{dir + "new2/kube-apiserver/0.log": {size: 5}}, true, 0, ""},
		{"the new pod exited twice", map[string]podLog{dir + "new2/kube-apiserver/0.log": {size: 5}, dir + "new2/kube-apiserver/1.log": {size: 5}, dir + "new2/kube-apiserver/2.log": {size: 1, age: time.Second}}, true, 2, dir + "new2/kube-apiserver/1.log"},
		{"an old restart log grown (the same manifest again)", map[string]podLog{dir + "new/kube-apiserver/1.log": {size: 20}}, true, 1, dir + "new/kube-apiserver/0.log"},
	} {
		if got := startedSince(before, tc.now, oldDir); got != tc.started {
			t.Errorf("%s: startedSince = %v", tc.name, got)
		}
		exits, last := exitsSince(before, tc.now, oldDir)
		if exits != tc.exits || last != tc.last {
			t.Errorf("%s: exitsSince = %d, %q; want %d, %q", tc.name, exits, last, tc.exits, tc.last)
		}
	}
}

// TestStopGroupScript runs stopGroupScript under each shell a master may
// have as sh (Debian's dash, bash) against real process groups: the
// group the pid file was written for is gone afterwards; a pid that is
// now another program's (whatever its name), or no group's leader, is
// left alone.
func TestStopGroupScript(t *testing.T) {
	t.Parallel()
	var shells []string
	for _, sh := range []string{"sh", "dash", "bash"} {
		if p, err := exec.LookPath(sh); err == nil {
			shells = append(shells, p)
		}
	}
	if len(shells) == 0 {
		t.Fatal("no sh on PATH")
	}
	for _, sh := range shells {
		for _, tc := range []struct {
			name string
			// argv starts the process whose pid the file gets, in a
			// group of its own unless it starts without setsid; PIDFILE
			// is replaced. nil: the file names a pid no process has.
			argv    []string
			want    string // the command line the script is told to expect
			stopped bool   // the group is gone afterwards
		}{
			{"the upgrade, exec'ed", []string{"setsid", "-w", sh, "-c", "echo $$ > PIDFILE; exec sleep 300"}, "sleep 300", true},
			{"the launcher's sh, before its exec", []string{"setsid", "-w", sh, "-c", "echo $$ > PIDFILE; sleep 300; true"}, "kubeadm upgrade", true},
			{"a pid now another program's", []string{"setsid", "-w", sh, "-c", "echo $$ > PIDFILE; exec sleep 300"}, "kubeadm upgrade", false},
			{"a pid now another sh's", []string{"setsid", "-w", sh, "-c", "echo $$ > PIDFILE; sleep 300; true"}, "kubeadm upgrade", false},
			{"not a group's leader", []string{sh, "-c", "echo $$ > PIDFILE; exec sleep 300"}, "sleep 300", false},
			{"no process any more", nil, "sleep 300", false},
		} {
			t.Run(filepath.Base(sh)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				pidFile := filepath.Join(t.TempDir(), "upgrade.pid")
				if tc.argv != nil {
					// The process writes its pid where its command line
					// says: the pid file, or (another program that
					// happens to have the pid) a file of its own, copied
					// to the pid file below, as after a pid's reuse.
					written := pidFile
					if tc.name == "a pid now another sh's" {
						written = filepath.Join(filepath.Dir(pidFile), "own.pid")
					}
					argv := slices.Clone(tc.argv)
					for i := range argv {
						argv[i] = strings.ReplaceAll(argv[i], "PIDFILE", written)
					}
					group := exec.Command(argv[0], argv[1:]...)
					if err := group.Start(); err != nil {
						t.Fatal(err)
					}
					// Reaped as soon as it ends, as a master's init or
					// SSH session reaps kubeadm.
					reaped := make(chan struct{})
					go func() { _ = group.Wait(); close(reaped) }()
					t.Cleanup(func() {
						_ = syscall.Kill(group.Process.Pid, syscall.SIGKILL)
						_ = syscall.Kill(-group.Process.Pid, syscall.SIGKILL)
						<-reaped
					})
					waitFile(t, written)
					if written != pidFile {
						if err := os.WriteFile(pidFile, readFile(t, written), 0o644); err != nil {
							t.Fatal(err)
						}
					}
				} else if err := os.WriteFile(pidFile, []byte("999999999\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				pid, err := strconv.Atoi(strings.TrimSpace(string(readFile(t, pidFile))))
				if err != nil {
					t.Fatal(err)
				}
				if tc.argv != nil && strings.Contains(tc.argv[len(tc.argv)-1], "exec sleep") {
					// The sh writes the file before it execs: until then
					// its command line names the file, as the launcher's.
					waitCmdline(t, pid, "sleep 300")
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				out, err := exec.CommandContext(ctx, sh, "-c", stopGroupScript, "stop", pidFile, tc.want).CombinedOutput()
				if err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
					t.Errorf("pid file left: %v", err)
				}
				if got := strings.TrimSpace(string(out)) == "stopped"; got != tc.stopped {
					t.Errorf("output %q; stopped %v, want %v", out, got, tc.stopped)
				}
				if tc.argv == nil {
					return
				}
				alive := syscall.Kill(pid, 0) == nil
				if alive == tc.stopped {
					t.Errorf("process %d alive %v after the script, want %v", pid, alive, !tc.stopped)
				}
			})
		}
	}
}

// waitCmdline waits up to 30 s (a hang guard) for process pid's command
// line to be want.
func waitCmdline(t *testing.T, pid int, want string) {
	t.Helper()
	pollFor(t, fmt.Sprintf("process %d's command line to be %q", pid, want), func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")) == want
	})
}

// waitFile waits up to 30 s (a hang guard) for path to hold a whole line.
func waitFile(t *testing.T, path string) {
	t.Helper()
	pollFor(t, path+" written", func() bool {
		b, err := os.ReadFile(path)
		return err == nil && len(b) > 0 && b[len(b)-1] == '\n'
	})
}

// pollFor polls done every 10 ms for up to 30 s, failing t after that.
func pollFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := wait.Until(ctx, 10*time.Millisecond, what, func() (bool, error) { return done(), nil }); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
