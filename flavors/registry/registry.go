// Package registry chooses a cluster's flavor: the one the operator names
// (--flavor, recorded with the cluster), else the one the provider finds
// on its machines (providers.MasterFormatter: kube-up's GCE metadata or
// AWS user data → kubeup; the metal provider's hosts → kubeadm; anything
// else → hamaster).
package registry

import (
	"log/slog"
	"os"
	"strings"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/hamaster"
	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/flavors/kubeup"
	"github.com/hamaster/hamaster/providers"
)

// Names lists the flavors, sorted.
func Names() []string { return []string{flavors.Hamaster, flavors.Kubeadm, flavors.KubeUp} }

// Detect is the flavor p finds on its machines.
func Detect(p providers.Provider) string {
	if mf := providers.OwnCapabilitiesOf(p).MasterFormatter; mf != nil && mf.MasterFormat() != "" {
		return mf.MasterFormat()
	}
	return flavors.Hamaster
}

// Open binds the flavor named name ("" for Detect's) to p; log (nil:
// discard) gets its etcd clients' lines. An unknown
// name, or a flavor p's masters cannot be in, is errkind.InvalidArgument
// naming --flavor and the valid choices.
func Open(name string, p providers.Provider, log *slog.Logger) (flavors.Flavor, error) {
	if name == "" {
		name = Detect(p)
	}
	switch name {
	case flavors.Hamaster:
		return hamaster.New(p)
	case flavors.KubeUp:
		return kubeup.New(p, log)
	case flavors.Kubeadm:
		f, err := kubeadm.New(p, log)
		if err != nil {
			return nil, err
		}
		// The operator's package install on the masters (the metal
		// lab's hamaster.env names its stand-in).
		f.SetUpgradeOptions(kubeadm.UpgradeOptionsFromEnv(os.Getenv))
		f.SetNodeBinary(os.Getenv(kubeadm.EnvNodeBinary))
		return f, nil
	}
	return nil, errkind.Errorf(errkind.InvalidArgument, "--flavor %q: want one of %s, or none for what the %s provider finds on its masters", name, strings.Join(Names(), ", "), p.Name())
}

// Check is Open's validation of name alone, for flags read before a
// provider is opened.
func Check(name string) error {
	for _, n := range Names() {
		if n == name || name == "" {
			return nil
		}
	}
	return errkind.Errorf(errkind.InvalidArgument, "--flavor %q: want one of %s (or none: what the provider finds on its masters)", name, strings.Join(Names(), ", "))
}

// Recognize names the flavor whose format a machine's documents are in,
// "" for none it knows: what the CLI gives providers as
// providers.Settings.Recognize (kube-up's AWS user data → kubeup).
func Recognize(docs map[string]string) string {
	if ud, ok := docs[providers.DocUserData]; ok && kubeup.Recognizes([]byte(ud)) {
		return flavors.KubeUp
	}
	return ""
}
