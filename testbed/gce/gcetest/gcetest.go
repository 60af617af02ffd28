// Package gcetest starts a GCE fake with a kube-up cluster's master 0 on
// it for tests: the fake in VPC mode (its instances boot as kube-up
// masters in a network-namespace VPC), master 0 created through the REST
// API exactly as kube-up's create-master-instance creates it (never by
// the provider under test), and a GCE provider pointed at it with the SSH
// access kube-up's `gcloud compute ssh` would have. Every process,
// namespace and file is removed when the test ends.
package gcetest

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/kubeup"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
)

// Region and Zones the test clusters use.
const (
	Region = "us-central1"
	ZoneA  = "us-central1-a"
	ZoneB  = "us-central1-b"
)

// Cluster is a kube-up cluster's master 0 on a fake, and a provider for it.
type Cluster struct {
	*KubeUpCluster
	// Name is the cluster (kube-up's INSTANCE_PREFIX).
	Name string
	// Master is master 0's name (MASTER_NAME, <Name>-master).
	Master   string
	Provider *gce.Provider
}

// Options for Up.
type Options = KubeUpOptions

// MasterName is master 0's name.
func MasterName(cluster string) string { return cluster + "-master" }

// Fake starts a fake GCE API without a data plane (o.Dir the test's own
// when empty), closed when the test ends.
func Fake(t testing.TB, o gcefake.Options) *gcefake.Server {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	f, err := gcefake.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Up starts a fake in VPC mode with master 0 (UpKubeUp) and opens the GCE
// provider on it.
func Up(t testing.TB, name string, o Options) *Cluster {
	t.Helper()
	k := UpKubeUp(t, name, o)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pp, err := gce.New(ctx, k.Settings)
	if err != nil {
		t.Fatal(err)
	}
	p := pp.(*gce.Provider)
	t.Cleanup(func() { p.Close() })
	// The kube-up flavor gives the provider its master format.
	if _, err := registry.Open(flavors.KubeUp, p, nil); err != nil {
		t.Fatal(err)
	}
	return &Cluster{KubeUpCluster: k, Name: name, Master: k.Master.Name, Provider: p}
}

// HTTP is a client trusting kube-up's cluster CA.
func (c *Cluster) HTTP() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.CAPool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
}

// StandaloneTemplate is master 0's template replicated for a master named
// name that forms etcd clusters of its own (INITIAL_ETCD_CLUSTER=name,
// INITIAL_ETCD_CLUSTER_STATE=new): a VM the provider can create, recreate
// and delete without touching master 0's etcd.
func (c *Cluster) StandaloneTemplate(ctx context.Context, t testing.TB, name string) providers.Template {
	t.Helper()
	master, err := c.Provider.Instances().Get(ctx, c.Master)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := c.Flavor(t).CloneTemplate(ctx, master.Template, name, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Env[kubeenv.InitialEtcdClusterState] = kubeenv.StateNew
	return tmpl
}

// Flavor is the kubeup flavor on the cluster's provider: what hamaster
// makes of these masters.
func (c *Cluster) Flavor(t testing.TB) *kubeup.Flavor {
	t.Helper()
	f, err := kubeup.New(c.Provider, nil)
	if err != nil {
		t.Fatal(err)
	}
	registry.Attach(c.Provider, f)
	return f
}
