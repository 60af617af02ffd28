package kubeadm

// Workers. A worker joined before the conversion names, in its
// /etc/kubernetes/kubelet.conf, the server kube-public/cluster-info
// named at its join: kubeadm join's kubelet-start phase writes
// bootstrap-kubelet.conf from the discovered cluster-info
// (cmd/kubeadm/app/cmd/phases/join/kubelet.go runKubeletStartJoinPhase),
// and the kubelet's TLS bootstrap turns it into kubelet.conf with the
// same server. kubeadm never moves it: `kubeadm upgrade node` skips its
// kubeconfig phase on a node that is no control plane
// (cmd/kubeadm/app/cmd/phases/upgrade/node/kubeconfig.go, v1.34.4:
// "Skipping phase. Not a control plane node."). So, after a conversion,
// each such kubelet still reaches master 0's own address, and its Node
// goes NotReady once master 0 is removed. hamaster moves it as an
// operator would by hand: the server set to the endpoint, the kubelet
// restarted, its Node heartbeating again before the next worker.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// WorkerKubeconfig is the worker's kubeconfig the pin check reads and
// PointConsumers moves.
const WorkerKubeconfig = KubernetesDir + "/kubelet.conf"

// WorkerReadyWait bounds the wait for a worker's Node to be Ready again
// after its kubelet restarted on the endpoint (its next status update:
// the kubelet's nodeStatusUpdateFrequency is 10 s).
const WorkerReadyWait = 2 * time.Minute

// WorkerFixByHand is what an operator runs on worker to move its
// kubelet to server (https://host:port) when hamaster cannot.
func WorkerFixByHand(worker, server string) string {
	return fmt.Sprintf("on %s: sed -i 's#^\\([[:space:]]*server:\\).*#\\1 %s#' %s && systemctl restart kubelet", worker, server, WorkerKubeconfig)
}

// workers lists the provider's workers, none when it knows none.
func (f *Flavor) workers(ctx context.Context) ([]providers.Worker, error) {
	if f.wl == nil {
		return nil, nil
	}
	ws, err := f.wl.Workers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the workers: %w", err)
	}
	return ws, nil
}

// workerRestartMark on a worker holds the server its running kubelet
// still uses: written before kubelet.conf is moved, removed once the
// kubelet restarted on the new one and its Node heartbeats again.
const workerRestartMark = "/var/lib/hamaster/worker-kubelet-restart-pending"

// workerServer prints the server the worker's kubelet uses: the one a
// restart still owed records (workerRestartMark), else the first server
// of its kubelet.conf; nothing when it has none (a host not joined yet).
const workerServer = `m=` + workerRestartMark + `; if [ -s "$m" ]; then head -n 1 "$m"; exit 0; fi
f=` + WorkerKubeconfig + `; [ -e "$f" ] || exit 0; sed -n 's/^[[:space:]]*server:[[:space:]]*//p' "$f" | head -n 1`

// workerReads bounds how many workers are read at once.
const workerReads = 8

// readWorkers reads the server each worker's kubelet names, all at
// once: worker → server ("" for a worker with no kubelet.conf). A
// worker that does not answer is an error naming it and the command
// that moves it by hand to endpointURL: what it names is unknown.
func (f *Flavor) readWorkers(ctx context.Context, ws []providers.Worker, endpointURL string) (map[string]string, error) {
	out := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	sem := make(chan struct{}, workerReads)
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			stdout, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), w.Name, workerServer)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("worker %s: read the server of its %s: %w (stderr: %s); once it answers, `hamaster status` checks it again; to move it by hand: %s",
					w.Name, WorkerKubeconfig, err, tail(stderr), WorkerFixByHand(w.Name, cmp.Or(endpointURL, "https://ENDPOINT"))))
				return
			}
			out[w.Name] = strings.Trim(strings.TrimSpace(string(stdout)), `"'`)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// workerPins are the workers (worker → the server its kubelet.conf
// names) whose kubelet names one master's own address, or one of the
// cluster's former endpoints (a pin of no master: no master's removal
// waits for it), and not the endpoint, sorted by worker, each with fix.
func workerPins(masters []PinMaster, endpoint string, formers []string, workers map[string]string, fix string) []flavors.Pin {
	names := make([]string, 0, len(workers))
	for w := range workers {
		names = append(names, w)
	}
	slices.Sort(names)
	var pins []flavors.Pin
	for _, w := range names {
		srv := workers[w]
		if formerNamed([]string{endpoint}, srv) != "" {
			continue // on the endpoint
		}
		if m := masterNamed(masters, srv); m != "" || formerNamed(formers, srv) != "" {
			pins = append(pins, flavors.Pin{Consumer: WorkerKubeconfig + " (worker)", On: w, Server: srv, Master: m, Fix: fix})
		}
	}
	return pins
}

// PointWorkers moves, one worker at a time, each worker's kubelet.conf
// that names one master's own address, or a former endpoint of the
// cluster (former.go), to https://endpoint: the file
// rewritten whole (workerRestartMark written first, so a run that
// stops before the restart restarts on the next one), the kubelet
// restarted, and its Node heartbeating again within WorkerReadyWait before the
// next worker is touched. A worker that names the endpoint already, or
// another address (a load balancer of the operator's), is left alone;
// so is one with no kubelet.conf. A worker that does not answer is
// warned of with the command that moves it by hand, and skipped: the
// pin check (status, remove-replica) names it until it is moved.
func (f *Flavor) PointWorkers(ctx context.Context, endpoint string) error {
	ws, err := f.workers(ctx)
	if err != nil || len(ws) == 0 {
		return err
	}
	server := "https://" + endpoint
	rs, err := f.p.Instances().List(ctx)
	if err != nil {
		return err
	}
	var masters []PinMaster
	for _, r := range rs {
		masters = append(masters, PinMaster{Replica: r.Name, Node: f.m.MachineHostname(r.Name, r.Address), Address: r.Address})
	}
	formers, err := f.formerEndpoints(ctx)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if err := f.pointWorker(ctx, w, masters, formers, server); err != nil {
			return err
		}
	}
	return nil
}

// formerEndpoints reads kubeadm-config's AnnotationFormerEndpoints
// through a running master.
func (f *Flavor) formerEndpoints(ctx context.Context) ([]string, error) {
	master, err := f.firstRunning(ctx, "read kubeadm-config through")
	if err != nil {
		return nil, err
	}
	jp := "{.metadata.annotations." + strings.ReplaceAll(AnnotationFormerEndpoints, ".", `\.`) + "}"
	out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), master, adminKubectl+"-n kube-system get configmap kubeadm-config -o jsonpath="+remote.ShellQuote(jp))
	if err != nil {
		return nil, fmt.Errorf("read kubeadm-config's %s on %s: %w (stderr: %s)", AnnotationFormerEndpoints, master, err, tail(stderr))
	}
	return ParseFormerEndpoints(string(out)), nil
}

// pointWorker is PointWorkers for one worker: workerRestartMark (the
// server its kubelet still uses) written first, then kubelet.conf, the
// kubelet restarted, its Node heartbeating again on the endpoint, the
// mark removed. A run that stopped anywhere in between finds the mark
// and goes on from the restart; the pin check reports the mark's server
// until then.
func (f *Flavor) pointWorker(ctx context.Context, w providers.Worker, masters []PinMaster, formers []string, server string) error {
	byHand := WorkerFixByHand(w.Name, server)
	doc, err := f.readIfExists(ctx, w.Name, WorkerKubeconfig)
	if err != nil {
		// A worker that is down does not hold the masters' move up:
		// it is named here, and status names it until it is moved.
		f.log.Warn("worker not reached: its kubelet.conf is not moved to the endpoint; status names it until it is (or move it by hand)", "worker", w.Name, "err", err, "by_hand", byHand)
		return nil
	}
	if len(doc) > 0 {
		srv, err := KubeconfigServer(doc)
		if err != nil {
			return fmt.Errorf("worker %s: %s: %w", w.Name, WorkerKubeconfig, err)
		}
		if srv != server && (masterNamed(masters, srv) != "" || formerNamed(formers, srv) != "") {
			moved, changed, err := SetKubeconfigServer(doc, server)
			if err != nil {
				return fmt.Errorf("worker %s: %s: %w", w.Name, WorkerKubeconfig, err)
			}
			if changed {
				if err := f.write(ctx, w.Name, workerRestartMark, []byte(srv+"\n"), 0o600); err != nil {
					return fmt.Errorf("worker %s: write %s: %w; to move it by hand: %s", w.Name, workerRestartMark, err, byHand)
				}
				if err := f.write(ctx, w.Name, WorkerKubeconfig, moved, 0o600); err != nil {
					return fmt.Errorf("worker %s: write %s: %w; to move it by hand: %s", w.Name, WorkerKubeconfig, err, byHand)
				}
				f.log.Info("worker's kubelet.conf moved to the endpoint", "worker", w.Name, "from", srv, "server", server)
			}
		}
	}
	mark, err := f.readIfExists(ctx, w.Name, workerRestartMark)
	if err != nil || len(mark) == 0 {
		return err
	}
	f.log.Info("restarting the worker's kubelet on its moved kubelet.conf", "worker", w.Name, "was", strings.TrimSpace(string(mark)))
	if err := f.restartKubelet(ctx, w.Name); err != nil {
		return fmt.Errorf("worker %s: restart the kubelet for its new kubelet.conf: %w; by hand: %s", w.Name, err, byHand)
	}
	if err := f.waitNodeHeartbeat(ctx, f.m.MachineHostname(w.Name, w.Address)); err != nil {
		return fmt.Errorf("worker %s: %w", w.Name, err)
	}
	if _, stderr, err := f.m.RunOnMachine(ctx, w.Name, "rm -f "+workerRestartMark); err != nil {
		return fmt.Errorf("worker %s: %w (stderr: %s)", w.Name, err, tail(stderr))
	}
	return nil
}

// nodeHeartbeat prints the status of node's Ready condition and its
// Lease's renewTime, on one line.
func nodeHeartbeat(node string) string {
	q := remote.ShellQuote(node)
	return "echo $(" + adminKubectl + "get node " + q + ` -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') $(` + adminKubectl + "-n kube-node-lease get lease " + q + " -o jsonpath='{.spec.renewTime}')"
}

// waitNodeHeartbeat waits WorkerReadyWait, reading through a running
// master, for node to be Ready with a Lease renewed after the first
// read: a Ready condition alone would pass at once (the Node stays
// Ready for the node monitor's grace period whatever its kubelet does);
// the first read comes after the kubelet's restart, so a later renewal
// is the new kubelet's, on its new kubelet.conf.
func (f *Flavor) waitNodeHeartbeat(ctx context.Context, node string) error {
	wctx, cancel := context.WithTimeout(ctx, WorkerReadyWait)
	defer cancel()
	var first, last string
	read := func() (ready, renew string, err error) {
		master, err := f.firstRunning(wctx, "read Node "+node+" through")
		if err != nil {
			return "", "", err
		}
		out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(wctx), master, nodeHeartbeat(node))
		if err != nil {
			return "", "", fmt.Errorf("%w (stderr: %s)", err, tail(stderr))
		}
		ready, renew, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
		return ready, renew, nil
	}
	err := wait.Until(wctx, 2*time.Second, "Node "+node+" to heartbeat on the endpoint", func() (bool, error) {
		ready, renew, err := read()
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = "Ready " + cmp.Or(ready, "unknown") + ", Lease renewed " + cmp.Or(renew, "never")
		if first == "" {
			first = cmp.Or(renew, "never")
			return false, nil
		}
		return ready == "True" && renew != "" && renew != first, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return nil
}
