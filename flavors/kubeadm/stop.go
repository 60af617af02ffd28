package kubeadm

import (
	"context"
	"fmt"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
)

var _ flavors.APIServerStopper = (*Flavor)(nil)

// stoppedAPIServer is where StopAPIServer moves the apiserver's manifest
// (Leave removes it once kubeadm reset has run).
const stoppedAPIServer = "/var/lib/hamaster/kube-apiserver.yaml.stopped"

// restoreAPIServer puts a manifest StopAPIServer moved back before
// kubeadm reset: reset takes a node without the kube-apiserver manifest
// for a worker (cmd/kubeadm/app/cmd/phases/reset: the etcd member and
// its data dir are a control plane's to clean), and would leave the
// etcd data behind. The apiserver it may start has no member left and
// is out of the load balancer; reset stops it with the rest.
var restoreAPIServer = fmt.Sprintf("if [ -f %[2]s ]; then mv -f %[2]s %[1]s; fi", APIServerManifest, stoppedAPIServer)

// APIServerStopTimeout bounds the wait until a stopped apiserver no longer
// listens: the kubelet gives a static pod its termination grace period
// (30 s by default) to shut down gracefully.
const APIServerStopTimeout = 90 * time.Second

// StopAPIServer implements flavors.APIServerStopper: the kube-apiserver
// manifest moves out of the kubelet's static pod path (the kubelet then
// stops the pod, as kubeadm's own upgrade does when it swaps a manifest:
// cmd/kubeadm/app/phases/upgrade/staticpods.go), and it waits until
// nothing listens on the apiserver's port. etcd keeps running.
func (f *Flavor) StopAPIServer(ctx context.Context, replica providers.Replica) error {
	move := fmt.Sprintf("mkdir -p /var/lib/hamaster && if [ -f %[1]s ]; then mv -f %[1]s %[2]s; fi", APIServerManifest, stoppedAPIServer)
	if _, stderr, err := f.m.RunOnMachine(ctx, replica.Name, move); err != nil {
		return fmt.Errorf("master %s: stop the apiserver: %w (stderr: %s)", replica.Name, err, tail(stderr))
	}
	wctx, cancel := context.WithTimeout(ctx, APIServerStopTimeout)
	defer cancel()
	listening := fmt.Sprintf("ss -Hltn 'sport = :%d' | grep -c . || true", DefaultBindPort)
	return wait.Until(wctx, 250*time.Millisecond, "the apiserver of "+replica.Name+" to stop", func() (bool, error) {
		out, _, err := f.m.RunOnMachine(providers.ReadOnly(wctx), replica.Name, listening)
		if err != nil {
			return false, nil // a dropped connection: ask again
		}
		return len(out) > 0 && out[0] == '0', nil
	})
}
