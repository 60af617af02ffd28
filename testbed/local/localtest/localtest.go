// Package localtest starts local-provider clusters for tests: it builds
// hamaster-node once per test binary, hands out 127.0.N.0/24 subnets that
// no concurrently running test (in any package) uses, and tears every
// cluster down (all processes stopped) when the test ends.
package localtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors/hamaster"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/local"
)

var (
	buildOnce sync.Once
	buildDir  string // built by this process: Main removes it
	shared    string // BinariesEnv's: left as it is
	buildErr  error
)

// binPrefix names a test process's build directory in os.TempDir():
// binPrefix<pid>-<random>, so a later process can tell whose it is.
const binPrefix = "hamaster-bin-"

// BinariesEnv names a directory holding hamaster-node and hamaster built
// with -tags hamaster_faults, shared by every test package of one run:
// make test builds them once and sets it, instead of each package
// linking its own pair (about 10 s of CPU a package on 2 cores).
const BinariesEnv = "HAMASTER_TEST_BINARIES"

// Binaries builds hamaster-node (and hamaster) once per test process and
// returns the directory holding them (~140 MB). Main removes it when the
// package's tests end; a process killed before that leaves it behind, and
// the next Binaries in any package reclaims it (its pid is gone). With
// BinariesEnv set, it returns that directory instead, once both binaries
// are found there, and nobody removes it.
func Binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if dir := os.Getenv(BinariesEnv); dir != "" {
			for _, name := range []string{"hamaster-node", "hamaster"} {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					buildErr = fmt.Errorf("%s=%s: %w (make test builds them: go build -tags hamaster_faults -o %s ./cmd/hamaster-node ./cmd/hamaster)", BinariesEnv, dir, err, dir)
					return
				}
			}
			shared = dir
			return
		}
		reclaimBuildDirs(os.TempDir())
		buildDir, buildErr = os.MkdirTemp("", binPrefix+strconv.Itoa(os.Getpid())+"-")
		if buildErr != nil {
			return
		}
		for _, pkg := range []string{"cmd/hamaster-node", "cmd/hamaster"} {
			out := filepath.Join(buildDir, filepath.Base(pkg))
			// hamaster_faults: the crash hook the crash-resume tests use (not in
			// the shipped binary).
			cmd := exec.Command("go", "build", "-tags", "hamaster_faults", "-o", out, "github.com/hamaster/hamaster/"+pkg)
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if shared != "" {
		return shared
	}
	return buildDir
}

// Main runs a package's tests and removes the binaries Binaries built:
// every package whose tests start local clusters (directly or through
// awstest/gcetest) calls it from TestMain, as os.Exit(localtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if buildDir != "" {
		if err := os.RemoveAll(buildDir); err != nil {
			fmt.Fprintf(os.Stderr, "localtest: remove %s: %v\n", buildDir, err)
		}
	}
	return code
}

// reclaimBuildDirs removes the build directories in dir whose test process
// is gone (killed by a timeout or by hand before Main could remove them).
func reclaimBuildDirs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := buildDirPID(e.Name())
		if !ok || !e.IsDir() || processAlive(pid) {
			continue
		}
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// buildDirPID reads the pid out of a build directory's name
// (binPrefix<pid>-<random>); names of another shape are not ours.
func buildDirPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, binPrefix)
	if !ok {
		return 0, false
	}
	pidStr, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	return pid, err == nil && pid > 0
}

// processAlive reports whether pid names a running process (EPERM: it
// exists, owned by somebody else).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// NodeBinary is the path of the built hamaster-node.
func NodeBinary(t testing.TB) string { return filepath.Join(Binaries(t), "hamaster-node") }

// HamasterBinary is the path of the built hamaster CLI.
func HamasterBinary(t testing.TB) string { return filepath.Join(Binaries(t), "hamaster") }

// AllocSubnet reserves a 127.0.N.0/24 for the test across processes with
// an O_EXCL file per subnet (stale files of dead test processes are
// reclaimed) and frees it at cleanup.
func AllocSubnet(t testing.TB) int {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "hamaster-test-subnets")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	start := os.Getpid() % 200
	for i := 0; i < 200; i++ {
		n := 20 + (start+i)%200
		path := filepath.Join(dir, strconv.Itoa(n))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, os.ErrExist) {
			b, _ := os.ReadFile(path)
			pid, _ := strconv.Atoi(string(b))
			if pid > 0 && !processAlive(pid) {
				os.Remove(path) // its test process is gone
				i--
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(f, os.Getpid())
		f.Close()
		if !subnetFree(n) {
			// Still in use by a cluster being torn down (or by something
			// else on this machine): keep the claim until the test ends so
			// nobody else picks it either, and try the next one.
			t.Cleanup(func() { os.Remove(path) })
			continue
		}
		// Registered before the caller's teardown, so it runs after it:
		// the subnet is released only once its processes are gone.
		t.Cleanup(func() { os.Remove(path) })
		return n
	}
	t.Fatal("no free test subnet")
	return 0
}

// subnetFree reports whether the addresses a local cluster on 127.0.n.0/24
// binds first are free.
func subnetFree(n int) bool {
	for _, addr := range []string{"1:6443", "2:2379", "2:2380", "2:6443", "3:2380"} {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.%d.%s", n, addr))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// Cluster is a running local cluster.
type Cluster struct {
	Settings providers.Settings
	Provider *local.Provider
}

// Options for Up.
type Options struct {
	Version   string
	ExtraArgs []string
	StateDir  string
	// ProviderOptions are extra local-provider options, e.g. the opt-in
	// timing ones (local.OptBootDelay, local.OptLBHealthInterval, ...);
	// unset, the cluster has today's instant timing.
	ProviderOptions map[string]string
	// ControlPlane and KubeAPIServerDir choose the real kube-apiserver
	// (local.UpOptions); unset, the stand-in.
	ControlPlane     string
	KubeAPIServerDir string
	// Addresses is local.AddressesLoopback or local.AddressesBenchmark
	// (local.UpOptions); unset, the provider's default for ControlPlane.
	Addresses string
}

// Up creates a single-master local cluster named name with fast etcd
// settings and registers its teardown.
func Up(t testing.TB, name string, o Options) *Cluster {
	t.Helper()
	if o.Version == "" {
		o.Version = "v1.30.2"
	}
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	s := providers.Settings{Cluster: name, StateDir: o.StateDir, Options: map[string]string{
		local.OptNodeBinary: NodeBinary(t),
		local.OptSubnet:     strconv.Itoa(AllocSubnet(t)),
	}}
	for k, v := range o.ProviderOptions {
		s.Options[k] = v
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := local.Down(ctx, s); err != nil {
			t.Errorf("local down %s: %v", name, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := local.Up(ctx, s, local.UpOptions{Certificates: hamaster.ReplicaFiles, Version: o.Version, ExtraArgs: o.ExtraArgs, Env: map[string]string{
		"ETCD_UNSAFE_NO_FSYNC": "true",
	}, ControlPlane: o.ControlPlane, KubeAPIServerDir: o.KubeAPIServerDir, Addresses: o.Addresses}, func(string) {})
	if err != nil {
		t.Fatalf("local up %s: %v", name, err)
	}
	return &Cluster{Settings: s, Provider: p}
}
