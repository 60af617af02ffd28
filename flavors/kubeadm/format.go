package kubeadm

import (
	"context"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
)

// MachineFormat is the flavor's providers.Format on providers whose
// machines carry documents (GCE's metadata items): a kubeadm master
// boots from its image (kubeadm, kubectl and the kubelet installed, as
// kubeadm's "Installing kubeadm, kubelet and kubectl" page has them),
// and kubeadm keeps its configuration on the machine (/etc/kubernetes)
// and in the cluster (kube-system/kubeadm-config), so the flavor owns no
// document: every metadata item is the machine's, copied to a clone as
// it is, and a master's template has no version, environment or files of
// its own. A new master is the source's machine joined with kubeadm
// join (Flavor.Join); a version changes in place (kubeadm upgrade), never
// by recreating a machine from a template.
type MachineFormat struct{}

var _ providers.Format = MachineFormat{}

// Owns implements providers.Format: no document is the flavor's.
func (MachineFormat) Owns(string) bool { return false }

// Encode implements providers.Format: nothing to write; a template that
// carries a version, flags, environment or files is refused (it is not a
// kubeadm master's: CloneTemplate gives the machine only).
func (MachineFormat) Encode(_ context.Context, t providers.Template) (map[string]string, error) {
	if t.Version != "" || len(t.ExtraArgs) > 0 || len(t.Env) > 0 || len(t.Files) > 0 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "a kubeadm master's machine carries no version, flags, environment or files (kubeadm keeps them in /etc/kubernetes and kubeadm-config; a version changes with kubeadm upgrade): got version %q, %d flags, %d env keys, %d files",
			t.Version, len(t.ExtraArgs), len(t.Env), len(t.Files))
	}
	return map[string]string{}, nil
}

// Decode implements providers.Format: the empty template.
func (MachineFormat) Decode(map[string]string) (providers.Template, error) {
	return providers.Template{Env: map[string]string{}, Files: map[string][]byte{}}, nil
}
