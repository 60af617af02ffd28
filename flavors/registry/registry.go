// Package registry chooses a cluster's flavor: the one the operator names
// (--flavor, recorded with the cluster), else the one the provider finds
// on its machines (providers.MasterFormatter: kube-up's GCE metadata or
// AWS user data → kubeup; the metal provider's hosts → kubeadm; anything
// else → hamaster).
package registry

import (
	"context"
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

// Bind is the one place a provider and its flavor are bound: it opens
// the provider named provider from reg with s, then the flavor s.Flavor
// names ("" for the one the provider finds on its masters: Detect), and
// returns both ready: the provider writes and reads templates in the
// flavor's format and builds its load balancer, health checks and
// firewall rules for the flavor's apiserver port. On an error the
// provider is closed. The flavor's etcd clients log to s.Logger.
func Bind(ctx context.Context, reg *providers.Registry, provider string, s providers.Settings) (providers.Provider, flavors.Flavor, error) {
	p, err := reg.Open(ctx, provider, s)
	if err != nil {
		return nil, nil, err
	}
	f, err := Open(s.Flavor, p, s.Logger)
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	return p, f, nil
}

// Open binds the flavor named name ("" for Detect's) to the provider p,
// already built: Bind's second half, for tests and tools that build
// their provider themselves. log (nil: discard) gets its etcd clients'
// lines. An unknown name, or a flavor p's masters cannot be in, is
// errkind.InvalidArgument naming --flavor and the valid choices.
func Open(name string, p providers.Provider, log *slog.Logger) (flavors.Flavor, error) {
	f, err := open(name, p, log)
	if err != nil {
		return nil, err
	}
	Attach(p, f)
	return f, nil
}

// Attach tells p the format its machines' templates are in and the port
// its apiservers serve on, both f's: the only place a provider is told
// them (providers.Formatted, providers.APIServerPorter). Open calls it;
// a test that builds a flavor with its own constructor calls it too.
func Attach(p providers.Provider, f flavors.Flavor) {
	c := providers.OwnCapabilitiesOf(p)
	if fp := c.Formatted; fp != nil {
		fp.SetFormat(f.Format())
	}
	if pp := c.APIServerPorter; pp != nil {
		pp.SetAPIServerPort(f.APIServerPort())
	}
}

func open(name string, p providers.Provider, log *slog.Logger) (flavors.Flavor, error) {
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
