// Package labcmdtest tests the test beds' commands (bin/gcefake,
// bin/metallab): their command lines, and the binaries as an operator runs
// them (built, their hamaster.env read, what they leave on the machine).
package labcmdtest

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/testbed/labcmd"
)

// Module is the import path the commands are built under.
const Module = "github.com/hamaster/hamaster"

// UsageCase is one command line and what run answers it with: the exit
// code, and a text its stderr holds.
type UsageCase struct {
	Name string
	Args []string
	Code int
	Want string
}

// Usage runs run over each case (in parallel) and checks its exit code
// and stderr.
func Usage(t *testing.T, run labcmd.Run, cases []UsageCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.Args, &out, &errb)
			if code != tc.Code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.Code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.Want) {
				t.Errorf("stderr lacks %q:\n%s", tc.Want, errb.String())
			}
		})
	}
}

// Build compiles the commands (paths in the module: "cmd/gcefake") into a
// directory of the test's and returns it.
func Build(t testing.TB, pkgs ...string) string {
	t.Helper()
	dir := t.TempDir()
	BuildInto(t, dir, pkgs...)
	return dir
}

// BuildInto compiles the commands into dir, each under its base name.
func BuildInto(t testing.TB, dir string, pkgs ...string) {
	t.Helper()
	for _, p := range pkgs {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, filepath.Base(p)), Module+"/"+p).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", p, err, out)
		}
	}
}

// Netns lists the machine's network namespaces (ip netns list).
func Netns(t testing.TB) map[string]bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			m[f[0]] = true
		}
	}
	return m
}

// ProcessesMentioning lists the processes whose command line holds s,
// each as "pid: command line".
func ProcessesMentioning(s string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return pids
}

// ReadEnv reads the "export K=V" lines of a hamaster.env, V without the
// single quotes a test bed may put around it.
func ReadEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = strings.Trim(v, "'")
		}
	}
	return env, sc.Err()
}
