package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/dataplane/vm"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/providers"
)

// instances implements providers.Instances with hamaster-node processes.
type instances struct{ p *Provider }

func (in *instances) proc(name string) proc {
	return proc{pidFile: in.p.l.rfile(name, "node.pid"), marker: in.p.l.rfile(name, "env")}
}

// List implements providers.Instances: every replica dir of the cluster.
func (in *instances) List(ctx context.Context) ([]providers.Replica, error) {
	ents, err := os.ReadDir(in.p.l.replicas())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	var out []providers.Replica
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		r, err := in.Get(ctx, e.Name())
		if errors.Is(err, errkind.NotFound) {
			continue // a dir without a template: an address reservation only
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get implements providers.Instances.
func (in *instances) Get(_ context.Context, name string) (providers.Replica, error) {
	b, err := os.ReadFile(in.p.l.rfile(name, "template.json"))
	if errors.Is(err, os.ErrNotExist) {
		return providers.Replica{}, errkind.Errorf(errkind.NotFound, "replica %s not found in cluster %s", name, in.p.cluster)
	}
	if err != nil {
		return providers.Replica{}, fmt.Errorf("read replica %s: %w", name, err)
	}
	var t providers.Template
	if err := json.Unmarshal(b, &t); err != nil {
		return providers.Replica{}, fmt.Errorf("read replica %s template: %w", name, err)
	}
	addr, err := in.address(name)
	if err != nil {
		return providers.Replica{}, err
	}
	state := providers.StateStopped
	if in.proc(name).pid() != 0 {
		state = providers.StateRunning
	}
	return providers.Replica{Name: name, Address: addr, State: state, Template: t}, nil
}

func (in *instances) readAddresses() (map[string]string, error) {
	m := map[string]string{}
	b, err := os.ReadFile(in.p.l.addresses())
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read address reservations: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read address reservations %s: %w", in.p.l.addresses(), err)
	}
	return m, nil
}

func (in *instances) address(name string) (string, error) {
	m, err := in.readAddresses()
	if err != nil {
		return "", err
	}
	a, ok := m[name]
	if !ok {
		return "", errkind.Errorf(errkind.NotFound, "replica %s has no reserved address", name)
	}
	return a, nil
}

// ReserveAddress implements providers.Instances: the lowest free host x of
// the cluster's /24, x in 2..254 (.1 is the static IP).
func (in *instances) ReserveAddress(_ context.Context, name, _ string) (string, error) {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	m, err := in.readAddresses()
	if err != nil {
		return "", err
	}
	if a, ok := m[name]; ok {
		return a, nil
	}
	used := map[string]bool{}
	for _, a := range m {
		used[a] = true
	}
	for x := 2; x < 255; x++ {
		a := in.p.info.Address(x).String()
		if used[a] {
			continue
		}
		m[name] = a
		if err := writeJSON(in.p.l.addresses(), m, 0o600); err != nil {
			return "", err
		}
		return a, nil
	}
	return "", errkind.Errorf(errkind.FailedPrecondition, "no free address left in %s", in.p.info.Prefix())
}

// ReleaseAddress implements providers.Instances.
func (in *instances) ReleaseAddress(_ context.Context, name string) error {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	m, err := in.readAddresses()
	if err != nil {
		return err
	}
	if _, ok := m[name]; !ok {
		return nil
	}
	delete(m, name)
	return writeJSON(in.p.l.addresses(), m, 0o600)
}

// Create implements providers.Instances.
func (in *instances) Create(ctx context.Context, name, _ string, tmpl providers.Template) (providers.Replica, error) {
	if r, err := in.Get(ctx, name); err == nil && r.Running() {
		return r, nil
	}
	if err := in.boot(ctx, name, tmpl); err != nil {
		return providers.Replica{}, fmt.Errorf("create replica %s: %w", name, err)
	}
	return in.Get(ctx, name)
}

// Recreate implements providers.Instances: stop the process, write the new
// template, start again on the same data dir and address.
func (in *instances) Recreate(ctx context.Context, name string, tmpl providers.Template) (providers.Replica, error) {
	if _, err := in.Get(ctx, name); err != nil {
		return providers.Replica{}, err
	}
	if err := in.proc(name).stop(ctx, 15*time.Second); err != nil {
		return providers.Replica{}, fmt.Errorf("recreate replica %s: stop: %w", name, err)
	}
	if err := in.boot(ctx, name, tmpl); err != nil {
		return providers.Replica{}, fmt.Errorf("recreate replica %s: %w", name, err)
	}
	return in.Get(ctx, name)
}

// Delete implements providers.Instances: stop, remove the replica dir (its
// disk) and release its address.
func (in *instances) Delete(ctx context.Context, name string) error {
	if err := in.proc(name).stop(ctx, 15*time.Second); err != nil {
		return fmt.Errorf("delete replica %s: stop: %w", name, err)
	}
	if err := os.RemoveAll(in.p.l.replica(name)); err != nil {
		return fmt.Errorf("delete replica %s: remove data: %w", name, err)
	}
	return in.ReleaseAddress(ctx, name)
}

// boot writes the replica's files and env and starts its process, then
// waits until its etcd runs (or fails).
func (in *instances) boot(ctx context.Context, name string, tmpl providers.Template) error {
	addr, err := in.address(name)
	if err != nil {
		return err
	}
	dir := in.p.l.replica(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir not writable: %w", err)
	}
	b, err := json.MarshalIndent(tmpl, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(in.p.l.rfile(name, "template.json"), b, 0o600); err != nil {
		return err
	}
	layout := vm.Layout{Dir: dir, DataDir: filepath.Join(dir, "data")}
	if in.p.info.Real() {
		// What the "VM image" runs, not part of the template: the real
		// apiserver, its binaries and the cluster's service-account key.
		tmpl = tmpl.Clone()
		tmpl.Env[nodeapi.KeyControlPlane] = nodeapi.ControlPlaneReal
		tmpl.Env[nodeapi.KeyKubeAPIServerDir] = in.p.info.KubeAPIServerDir
		tmpl.Env[nodeapi.KeyServiceAccountKeyFile] = in.p.l.serviceAccountKey()
	}
	envPath, err := vm.Prepare(layout, name, addr, vm.Spec{Version: tmpl.Version, ExtraArgs: tmpl.ExtraArgs, Env: tmpl.Env, Files: tmpl.Files})
	if err != nil {
		return err
	}
	bin, err := in.p.nodeBinary()
	if err != nil {
		return err
	}
	if err := in.p.ensureNetwork(); err != nil {
		return err
	}
	if err := in.p.waitBoot(ctx, name); err != nil {
		return err
	}
	logPath := in.p.l.rfile(name, "node.log")
	proc, err := start(bin, []string{"replica", "--env-file", envPath}, logPath, in.p.l.rfile(name, "node.pid"))
	if err != nil {
		return err
	}
	pid := proc.Pid()
	statusPath := in.p.l.rfile(name, "status.json")
	return poll(ctx, fmt.Sprintf("replica %s's etcd to start (log: %s)", name, logPath), func() (bool, error) {
		if why := proc.ExitReason(); why != "" {
			return false, fmt.Errorf("replica %s (pid %d) exited at start (%s): %s (log: %s)", name, pid, why, lastLogError(logPath), logPath)
		}
		st, err := nodeapi.ReadStatus(statusPath)
		if err != nil || st.PID != pid {
			return false, nil
		}
		switch st.Etcd {
		case nodeapi.EtcdRunning:
			return true, nil
		case nodeapi.EtcdFailed:
			_ = syscall.Kill(pid, syscall.SIGTERM)
			return false, fmt.Errorf("replica %s: etcd failed: %s", name, st.EtcdError)
		}
		return false, nil
	})
}
