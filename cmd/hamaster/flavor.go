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
	named, err := namedFlavor(name, stateDir, cluster)
	if err != nil {
		return nil, err
	}
	return flavorregistry.Open(named, p, log)
}

// namedFlavor is the cluster's flavor as --flavor (name) names it or
// the cluster recorded it, "" for neither: what the provider is told
// (providers.Settings.Flavor) before it finds its masters. A name other
// than the recorded one is refused before anything changes: a cluster's
// masters do not change format.
func namedFlavor(name, stateDir, cluster string) (string, error) {
	recorded, err := workflows.LoadFlavor(stateDir, cluster)
	if err != nil {
		return "", err
	}
	if name != "" && recorded != "" && name != recorded {
		return "", errkind.Errorf(errkind.InvalidArgument, "--flavor %s: cluster %s's masters are recorded as %s (%s); a cluster's flavor does not change", name, cluster, recorded, workflows.FlavorFile(stateDir, cluster))
	}
	return cmp.Or(name, recorded), nil
}
