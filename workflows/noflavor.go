package workflows

import (
	"context"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/providers"
)

// ErrNoFlavor is what the workflows return when their Deps were built
// without a flavor (Deps.Master nil): the provider and its flavor are
// bound first (flavors/registry.Bind).
var ErrNoFlavor = errkind.Errorf(errkind.FailedPrecondition, "workflows: no flavor bound to the provider (Deps.Master is nil): bind the provider and its flavor first (flavors/registry.Bind)")

// checkBound refuses Deps without a provider or a flavor.
func (d *Deps) checkBound() error {
	if d.Provider == nil {
		return errkind.Errorf(errkind.FailedPrecondition, "workflows: no provider (Deps.Provider is nil)")
	}
	if d.Master == nil {
		return ErrNoFlavor
	}
	return nil
}

// noFlavor is Deps.Flavor when none is bound: every call that can fail
// fails with ErrNoFlavor, the others answer nothing.
type noFlavor struct{}

func (noFlavor) Name() string                               { return "none" }
func (noFlavor) EtcdClusters() []string                     { return nil }
func (noFlavor) EtcdMember(_, _, _ string) (string, string) { return "", "" }
func (noFlavor) EtcdCluster(context.Context, string, ...string) (*etcdmember.Client, error) {
	return nil, ErrNoFlavor
}
func (noFlavor) CloneTemplate(context.Context, providers.Template, string, string, map[string][]etcdmember.Member, map[string][]byte) (providers.Template, error) {
	return providers.Template{}, ErrNoFlavor
}
func (noFlavor) MasterCA(context.Context) ([]byte, error)   { return nil, ErrNoFlavor }
func (noFlavor) APIServerPort() int                         { return 0 }
func (noFlavor) APIServerName() string                      { return "" }
func (noFlavor) Format() providers.Format                   { return nil }
func (noFlavor) CheckVersion(context.Context, string) error { return ErrNoFlavor }
