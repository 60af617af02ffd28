// Package gcetest starts a GCE fake with a single-master cluster on it for
// tests: the fake (data plane included), the cluster's CA and operator etcd
// client certificate in a state dir, master 0 cloned from nothing (as
// kube-up would create it) holding the static external address. Every
// process is stopped when the test ends.
package gcetest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"

	"path/filepath"
	"testing"
	"time"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/providers/gce/gcefake"
	"github.com/hamaster/hamaster/providers/local/localtest"
)

// Region and Zones the test clusters use.
const (
	Region = "us-central1"
	ZoneA  = "us-central1-a"
	ZoneB  = "us-central1-b"
)

// Cluster is a running single-master cluster on a fake.
type Cluster struct {
	Name     string
	Fake     *gcefake.Server
	Provider *gce.Provider
	Settings providers.Settings
	CA       *certs.CA
	// StaticIP is the cluster's external address (a loopback IP).
	StaticIP string
	// Master is master 0's name.
	Master string
}

// Options for Up.
type Options struct {
	Version string
	// Latency is each operation's latency (default 20 ms).
	Latency time.Duration
}

// MasterName is master 0's name.
func MasterName(cluster string) string { return cluster + "-master" }

// Up starts a fake and creates master 0 on it.
func Up(t testing.TB, name string, o Options) *Cluster {
	t.Helper()
	if o.Version == "" {
		o.Version = "v1.30.2"
	}
	if o.Latency == 0 {
		o.Latency = 20 * time.Millisecond
	}
	fake, err := gcefake.New(gcefake.Options{Subnet: localtest.AllocSubnet(t), NodeBinary: localtest.NodeBinary(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	lat := o.Latency
	fake.SetLatency(func(string) time.Duration { return lat })
	fake.AddManagedZone("example-zone", "example.test.")
	stateDir := t.TempDir()
	s := providers.Settings{Cluster: name, StateDir: stateDir, Out: io.Discard, Options: map[string]string{
		gce.OptProject: fake.Project(), gce.OptRegion: Region, gce.OptZones: ZoneA + "," + ZoneB,
		gce.OptEndpoint: fake.URL, gce.OptDNSZone: "example-zone", gce.OptDrainSeconds: "1", gce.OptOpTimeout: "30s",
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pki := filepath.Join(stateDir, name, "pki")
	ca, _, err := certs.LoadOrCreateCA(pki, name+"-ca", certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.IssueClient("hamaster", nil, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	if err := pair.Write(filepath.Join(pki, "etcd-client.crt"), filepath.Join(pki, "etcd-client.key")); err != nil {
		t.Fatal(err)
	}
	pp, err := gce.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	p := pp.(*gce.Provider)
	t.Cleanup(func() { p.Close() })
	c := &Cluster{Name: name, Fake: fake, Provider: p, Settings: s, CA: ca, Master: MasterName(name)}
	if c.StaticIP, err = p.EnsureStaticAddress(ctx); err != nil {
		t.Fatal(err)
	}
	addr, err := p.Instances().ReserveAddress(ctx, c.Master, ZoneA)
	if err != nil {
		t.Fatal(err)
	}
	files, err := providers.ReplicaFiles(ca, c.Master, addr, certs.APIServerSANs{StaticIP: c.StaticIP})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := providers.Template{
		Version: o.Version,
		Env: map[string]string{
			providers.EnvInitialEtcdCluster:      c.Master + "=" + providers.PeerURL(addr),
			providers.EnvEtcdInitialClusterState: "new",
			"ETCD_UNSAFE_NO_FSYNC":               "true",
			"CLUSTER_NAME":                       name,
		},
		Files: files,
		Machine: map[string]string{
			gce.MachineType: "e2-standard-2", gce.MachineImage: "projects/cos-cloud/global/images/cos-stable-109",
			gce.MachineBootDiskGB: "20", gce.MachineBootDiskType: "pd-balanced", gce.MachineDataDiskGB: "20", gce.MachineDataDiskType: "pd-ssd",
			gce.MachineTags: name + "-master", gce.MachineSA: "default", gce.MachineScopes: "https://www.googleapis.com/auth/cloud-platform",
			"metadata.startup-script": "#! /bin/bash\n/home/kubernetes/bin/configure.sh", "label.env": "test",
		},
	}
	if _, err := p.Instances().Create(ctx, c.Master, ZoneA, tmpl); err != nil {
		t.Fatalf("create master 0: %v", err)
	}
	if err := p.StaticIP().Attach(ctx, c.Master); err != nil {
		t.Fatalf("attach static IP: %v", err)
	}
	if err := c.WaitReady(ctx, c.StaticIP); err != nil {
		t.Fatal(err)
	}
	return c
}

// HTTP is a client trusting the cluster's CA.
func (c *Cluster) HTTP() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.CA.Pool(), MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
}

// WaitReady polls https://ip:443/readyz until 200.
func (c *Cluster) WaitReady(ctx context.Context, ip string) error {
	client := c.HTTP()
	url := fmt.Sprintf("https://%s:%d/readyz", ip, c.Provider.APIServerPort())
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last: %v)", url, ctx.Err(), last)
		case <-tick.C:
		}
	}
}
