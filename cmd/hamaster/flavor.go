package main

import (
	"cmp"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/workflows"
)

// namedFlavor is the cluster's flavor as --flavor (name) names it or
// the cluster recorded it (workflows.FlavorFile, read once here), "" for
// neither: what the provider is told (providers.Settings.Flavor) and
// what flavors/registry.Bind binds to it ("": what the provider finds on
// its masters). A name other
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
