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
		out, _, err := f.m.RunOnMachine(wctx, replica.Name, listening)
		if err != nil {
			return false, nil // a dropped connection: ask again
		}
		return len(out) > 0 && out[0] == '0', nil
	})
}
