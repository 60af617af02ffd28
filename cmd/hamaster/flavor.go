package main

import (
	"cmp"
	"log/slog"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	flavorregistry "github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// chooseFlavor binds the cluster's flavor to p: --flavor (name) if given,
// else the one recorded with the cluster (workflows.FlavorFile: the first
// change records it, as local up records --control-plane), else what p
// finds on its masters. A name other than the recorded one is refused
// before anything changes: a cluster's masters do not change format.
func chooseFlavor(name, stateDir, cluster string, p providers.Provider, log *slog.Logger) (flavors.Flavor, error) {
	recorded, err := workflows.LoadFlavor(stateDir, cluster)
	if err != nil {
		return nil, err
	}
	if name != "" && recorded != "" && name != recorded {
		return nil, errkind.Errorf(errkind.InvalidArgument, "--flavor %s: cluster %s's masters are recorded as %s (%s); a cluster's flavor does not change", name, cluster, recorded, workflows.FlavorFile(stateDir, cluster))
	}
	return flavorregistry.Open(cmp.Or(name, recorded), p, log)
}
