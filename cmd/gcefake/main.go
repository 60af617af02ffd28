// Command gcefake serves the Compute Engine and Cloud DNS REST APIs with a
// kube-up master to rehearse hamaster's GCE path against, on this machine
// and without a Google account. See usage below and the README section
// "Try the GCE path without a Google account".
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hamaster/hamaster/internal/nodebin"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcefake/kubeadmmaster"
	"github.com/hamaster/hamaster/testbed/gce/gcefake/kubeupmaster"
	"github.com/hamaster/hamaster/testbed/kubeadmhost"
	"github.com/hamaster/hamaster/testbed/labcmd"
	"github.com/hamaster/hamaster/testbed/vpc"
)

const usage = `usage: gcefake --state DIR --kube-up-master NAME [flags]
       gcefake --state DIR --kubeadm-master NAME [--kubeadm-version V] [flags]

gcefake is a stand-in for a GCE project: it serves the Compute Engine and
Cloud DNS REST APIs hamaster's gce provider calls, and creates in it the
master a kube-up.sh cluster starts with, exactly as kube-up creates it
(cluster/gce/util.sh create-master, gci/master-helper.sh
create-master-instance): the static IP NAME-ip, the disk NAME-pd, the
firewall rules NAME-https and NAME-etcd, and the instance NAME with
kube-env and kube-master-certs metadata. Instances are real: each is a
network namespace on a private VPC (10.128.0.0/20) running
"hamaster-node kube-up-master" (etcd main on 127.0.0.1:2379, events on
127.0.0.1:4002, the apiserver stand-in on :443) and sshd on port 22.
From this machine only external addresses (--external-range) are
reachable, as from an operator's laptop.

When master NAME serves on its static IP, gcefake writes DIR/hamaster.env
(export HAMASTER_... lines that point hamaster at it) and runs until
SIGINT or SIGTERM, then stops every process and deletes every namespace
and file it made (killed with SIGKILL, its processes die with it but
its namespaces stay: ip netns list | grep hm-f, then ip netns del each,
and remove DIR/gcefake). It needs root (network namespaces), iproute2's
ip and OpenSSH's sshd.

  terminal 1:  sudo bin/gcefake --state /tmp/gce --kube-up-master kubernetes-master
  terminal 2:  sudo -s
               . /tmp/gce/hamaster.env
               bin/hamaster add-replica --yes
               curl --cacert /tmp/gce/ca.crt https://$GCEFAKE_STATIC_IP/readyz

With --kubeadm-master NAME instead, the project has a kubeadm image
(ubuntu-2404-kubeadm-<version>: kubeadm, kubectl and the test bed's
kubelet installed, each VM with its own /etc/kubernetes, /var/lib and
/run) and master NAME is a VM from it that gcefake initialises with the
real kubeadm init over SSH, the static IP NAME-ip as its
controlPlaneEndpoint; DIR/admin.conf is its admin.conf (KUBECONFIG in
hamaster.env). It needs the real binaries (make kube-apiserver) and
hamaster-kubelet (make build).

flags:
`

// config is the parsed command line.
type config struct {
	state, master, project, zone, nodeBinary, addr, apiDir, external, logLevel string
	latency                                                                    time.Duration
	releases                                                                   []string
	// kubeadm: --kubeadm-master, its version, the kubelet program and
	// the real binaries.
	kubeadmMaster, kubeadmVersion, kubelet, binDir string
}

func main() {
	labcmd.Main(run)
}

func parse(args []string, stderr io.Writer) (config, int, error) {
	var c config
	fs := labcmd.FlagSet("gcefake", usage, stderr)
	fs.StringVar(&c.state, "state", "", "`DIR` for the fake's files (disks, logs, keys) and hamaster.env (required; created if missing)")
	fs.StringVar(&c.master, "kube-up-master", "", "kube-up's MASTER_NAME of the master to create, `NAME` = INSTANCE_PREFIX-master, e.g. kubernetes-master (required)")
	fs.StringVar(&c.kubeadmMaster, "kubeadm-master", "", "instead of a kube-up master, `NAME` (<cluster>-master) made from the fake's kubeadm image and initialised by the real kubeadm init over SSH")
	fs.StringVar(&c.kubeadmVersion, "kubeadm-version", "v1.33.13", "the kubeadm image's `VERSION` (its kubeadm, kubectl and kubelet; the real binaries must be built: make kube-apiserver)")
	fs.StringVar(&c.kubelet, "kubelet", "", "`PATH` of hamaster-kubelet, the kubeadm image's kubelet (default: next to gcefake, then $PATH)")
	fs.StringVar(&c.binDir, "kube-bin-dir", "", "`DIR` of the real binaries, <DIR>/<version>/kubeadm ... (default: $HAMASTER_REAL_APISERVER_DIR, else make kube-apiserver's ~/.cache/hamaster/kube-apiserver)")
	fs.StringVar(&c.project, "project", "hamaster-test", "the `PROJECT` the fake serves")
	fs.StringVar(&c.zone, "zone", "us-central1-b", "master NAME's `ZONE` (the region is its prefix)")
	fs.StringVar(&c.nodeBinary, "node-binary", "", "`PATH` of hamaster-node (default: next to gcefake, then $PATH)")
	fs.StringVar(&c.addr, "listen", "127.0.0.1:0", "`ADDR` the APIs listen on (port 0: a free one)")
	fs.StringVar(&c.apiDir, "api-dir", "", "google.golang.org/api's module `DIR` holding the discovery documents (default: found with go env GOMODCACHE)")
	fs.StringVar(&c.external, "external-range", "198.18.250.0/24", "`CIDR` of external addresses (RFC 2544's test range: nothing leaves the machine); give each gcefake its own")
	fs.DurationVar(&c.latency, "op-latency", 500*time.Millisecond, "how long each operation takes to be DONE")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug (every API call), info, warn or error")
	fs.Func("releases", "`VERSIONS` (comma-separated, default v1.31.0) the fake's release mirror publishes for rolling-upgrade (hamaster.env points --gce-release-url at it; the masters cannot reach the real dl.k8s.io)", func(v string) error {
		c.releases = nil
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); !kubeenv.IsReleaseVersion(r) {
				return fmt.Errorf("%q is not a release version such as v1.31.0", r)
			}
			c.releases = append(c.releases, strings.TrimSpace(r))
		}
		return nil
	})
	if code, err := labcmd.Parse(fs, args); err != nil {
		return c, code, err
	}
	if c.releases == nil {
		c.releases = []string{"v1.31.0"}
	}
	if c.state == "" || (c.master == "") == (c.kubeadmMaster == "") {
		fs.Usage()
		return c, 2, fmt.Errorf("--state and --kube-up-master (or --kubeadm-master) are required")
	}
	if c.kubeadmMaster != "" {
		if !strings.HasSuffix(c.kubeadmMaster, "-master") || len(c.kubeadmMaster) <= len("-master") {
			return c, 2, fmt.Errorf("--kubeadm-master %q: the gce provider finds masters named <cluster>-master (e.g. kubernetes-master)", c.kubeadmMaster)
		}
		if !kubeenv.IsReleaseVersion(c.kubeadmVersion) {
			return c, 2, fmt.Errorf("--kubeadm-version %q: want a release such as v1.33.13", c.kubeadmVersion)
		}
	} else if !strings.HasSuffix(c.master, "-master") || len(c.master) <= len("-master") {
		return c, 2, fmt.Errorf("--kube-up-master %q: kube-up names its master INSTANCE_PREFIX-master (e.g. kubernetes-master)", c.master)
	}
	if strings.LastIndex(c.zone, "-") <= 0 {
		return c, 2, fmt.Errorf("--zone %q: want a zone such as us-central1-b", c.zone)
	}
	return c, 0, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, logger, code, ok := labcmd.Start("gcefake", args, stderr, parse, func(c config) string { return c.logLevel })
	if !ok {
		return code
	}
	if err := serve(ctx, c, logger, stdout); err != nil {
		fmt.Fprintf(stderr, "gcefake: %v\n", err)
		return 1
	}
	return 0
}

// preflight names what the machine lacks.
func preflight(c *config) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: its VMs are network namespaces (ip netns); run it with sudo")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("iproute2's ip is missing (apt-get install iproute2)")
	}
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		return errors.New("/usr/sbin/sshd is missing: each VM runs OpenSSH's server (apt-get install openssh-server)")
	}
	nb, err := nodebin.Find(c.nodeBinary, "--node-binary")
	if err != nil {
		return err
	}
	if c.nodeBinary, err = filepath.Abs(nb); err != nil {
		return err
	}
	if c.kubeadmMaster == "" {
		return nil
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return errors.New("util-linux's nsenter is missing (apt-get install util-linux): the kubeadm VMs' kubelet runs in their namespaces")
	}
	pkgs, err := kubeadmhost.FindPackages(kubeadmhost.Packages{Kubelet: c.kubelet, KubeletFlag: "--kubelet", BinDir: c.binDir, BinDirFlag: "--kube-bin-dir"}, c.kubeadmVersion)
	if err != nil {
		return err
	}
	c.kubelet, c.binDir = pkgs.Kubelet, pkgs.BinDir
	return nil
}

// serve runs the fake until ctx is done; every process, namespace and
// file it made is gone when it returns.
func serve(ctx context.Context, c config, logger *slog.Logger, stdout io.Writer) (err error) {
	if err := preflight(&c); err != nil {
		return err
	}
	ext, err := netip.ParsePrefix(c.external)
	if err != nil {
		return fmt.Errorf("--external-range: %w", err)
	}
	state, err := filepath.Abs(c.state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		return fmt.Errorf("--state: %w", err)
	}
	// Everything gcefake writes, apart from hamaster.env and ca.crt, is
	// under DIR/gcefake.
	dir := filepath.Join(state, "gcefake")
	caFile := filepath.Join(state, "ca.crt")
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists: another gcefake uses --state %s, or one was killed (remove the directory)", dir, state)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		for _, p := range []string{filepath.Join(state, "hamaster.env"), caFile, filepath.Join(state, "admin.conf"), dir} {
			if rerr := os.RemoveAll(p); rerr != nil && err == nil {
				err = rerr
			}
		}
	}()

	b := make([]byte, 2)
	_, _ = rand.Read(b)
	vnet, err := vpc.New(ctx, vpc.Options{ID: "f" + hex.EncodeToString(b), Subnet: netip.MustParsePrefix("10.128.0.0/20"), External: ext})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := vnet.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	vo := &gcefake.VPCOptions{Net: vnet}
	if c.kubeadmMaster != "" {
		vo.Kubeadm = &gcefake.KubeadmOptions{Images: map[string]string{kubeadmmaster.Image(c.kubeadmVersion): c.kubeadmVersion},
			Kubelet: c.kubelet, BinDir: c.binDir}
	}
	fake, err := gcefake.New(gcefake.Options{Project: c.project, NodeBinary: c.nodeBinary, Dir: dir, Addr: c.addr, APIDir: c.apiDir, Logger: logger,
		VPC: vo})
	if err != nil {
		return err
	}
	defer fake.Close()
	lat := c.latency
	fake.SetLatency(func(string) time.Duration { return lat })
	fake.AddManagedZone("gcefake-zone", "gcefake.test.")
	logger.Info("serving Compute and Cloud DNS", "url", fake.URL, "project", c.project)

	for _, v := range c.releases {
		if err := fake.AddRelease(v, gcefake.ReleaseOptions{}); err != nil {
			return err
		}
	}
	keyFile, line, err := kubeupmaster.WriteSSHKey(filepath.Join(dir, "ssh"), "hamaster")
	if err != nil {
		return err
	}
	if c.kubeadmMaster != "" {
		return serveKubeadm(ctx, c, fake, state, keyFile, line, logger, stdout)
	}
	prefix := strings.TrimSuffix(c.master, "-master")
	start := time.Now()
	m, err := kubeupmaster.Create(ctx, kubeupmaster.Options{Endpoint: fake.URL, Project: c.project, Zone: c.zone, InstancePrefix: prefix, SSHKeys: []string{line}})
	if err != nil {
		return fmt.Errorf("create kube-up master %s: %w", c.master, err)
	}
	logger.Info("created kube-up master; waiting for it to serve", "master", m.Name, "static_ip", m.StaticIP)
	failed := func() string {
		if out := fake.SerialPortOutput(m.Zone, m.Name); strings.Contains(out, "startup-script exit status") {
			return out
		}
		return ""
	}
	if err := kubeupmaster.WaitReady(ctx, m.Metadata.ClusterCA.Pool(), m.StaticIP, 3*time.Minute, failed); err != nil {
		return err
	}
	if err := os.WriteFile(caFile, m.Metadata.ClusterCA.CertPEM, 0o644); err != nil {
		return err
	}
	envFile, err := writeEnv(c, fake, state, keyFile, prefix, m.Region, m.Name,
		[]string{"export HAMASTER_GCE_RELEASE_URL=" + fake.ReleaseURL()},
		"the master's static IP and the cluster CA (curl --cacert)",
		"export GCEFAKE_STATIC_IP="+m.StaticIP, "export GCEFAKE_CA="+caFile)
	if err != nil {
		return err
	}
	ready := fmt.Sprintf("kube-up master %s serves https://%s:443 (ready after %v)", m.Name, m.StaticIP, time.Since(start).Round(100*time.Millisecond))
	return announce(ctx, stdout, c, fake, ready, envFile, "hamaster add-replica --yes", keyFile, m.StaticIP)
}

// serveKubeadm creates master c.kubeadmMaster from the kubeadm image
// (kubeadmmaster.Create), initialises it with the real kubeadm init over
// SSH (the static IP as controlPlaneEndpoint), writes hamaster.env,
// ca.crt and admin.conf, and runs until ctx is done.
func serveKubeadm(ctx context.Context, c config, fake *gcefake.Server, state, keyFile, sshLine string, logger *slog.Logger, stdout io.Writer) error {
	caFile, adminFile := filepath.Join(state, "ca.crt"), filepath.Join(state, "admin.conf")
	start := time.Now()
	m, err := kubeadmmaster.Create(ctx, kubeadmmaster.Options{Endpoint: fake.URL, Project: c.project, Zone: c.zone, Name: c.kubeadmMaster,
		Image: kubeadmmaster.Image(c.kubeadmVersion), SSHKeys: []string{sshLine}})
	if err != nil {
		return fmt.Errorf("create kubeadm master %s: %w", c.kubeadmMaster, err)
	}
	endpoint := m.StaticIP + ":6443"
	logger.Info("created the kubeadm VM; kubeadm init over SSH", "master", m.Name, "static_ip", m.StaticIP, "control_plane_endpoint", endpoint)
	s := kubeadmmaster.SSH{User: "hamaster", KeyFile: keyFile, KnownHostsFile: fake.KnownHostsFile(), Port: gcefake.SSHPort}
	_, took, admin, err := kubeadmmaster.Init(ctx, s, m, kubeadmhost.Init{Version: c.kubeadmVersion, ControlPlaneEndpoint: endpoint})
	if err != nil {
		return err
	}
	cl, err := s.Dial(ctx, m.StaticIP)
	if err != nil {
		return err
	}
	ca, _, err := cl.Run(ctx, "cat /etc/kubernetes/pki/ca.crt")
	cl.Close()
	if err != nil {
		return fmt.Errorf("the cluster CA of %s: %w", m.Name, err)
	}
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(adminFile, admin, 0o600); err != nil {
		return err
	}
	envFile, err := writeEnv(c, fake, state, keyFile, strings.TrimSuffix(m.Name, "-master"), m.Region, m.Name,
		[]string{"export HAMASTER_FLAVOR=kubeadm"},
		"kubectl's admin.conf (server: the static IP), the static IP and the cluster CA",
		"export KUBECONFIG="+adminFile, "export GCEFAKE_STATIC_IP="+m.StaticIP, "export GCEFAKE_CA="+caFile)
	if err != nil {
		return err
	}
	ready := fmt.Sprintf("kubeadm master %s serves https://%s (kubeadm init %v, ready after %v)", m.Name, endpoint, took.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	return announce(ctx, stdout, c, fake, ready, envFile, "kubectl get nodes; hamaster status", keyFile, m.StaticIP)
}

// announce tells the operator what serves (ready) and how to use it (try,
// after sourcing envFile; SSH to the master at ip), then runs until ctx is
// done.
func announce(ctx context.Context, stdout io.Writer, c config, fake *gcefake.Server, ready, envFile, try, keyFile, ip string) error {
	fmt.Fprintf(stdout, "gcefake: %s\n", ready)
	fmt.Fprintf(stdout, "gcefake: Compute and Cloud DNS at %s, project %s, zone %s\n", fake.URL, c.project, c.zone)
	fmt.Fprintf(stdout, "gcefake: in another terminal: . %s; %s\n", envFile, try)
	fmt.Fprintf(stdout, "gcefake: SSH: ssh -i %s -o UserKnownHostsFile=%s hamaster@%s\n", keyFile, fake.KnownHostsFile(), ip)
	<-ctx.Done()
	fmt.Fprintln(stdout, "gcefake: stopping: every VM, load balancer and namespace goes")
	return nil
}

// writeEnv writes state's hamaster.env (whole or not at all) and returns
// its path: hamaster pointed at the fake's project, cluster and master
// (flavor: the master's tool's own variables), then what is not
// hamaster's (notHamaster, said in note).
func writeEnv(c config, fake *gcefake.Server, state, keyFile, cluster, region, master string, flavor []string, note string, notHamaster ...string) (string, error) {
	envFile := filepath.Join(state, "hamaster.env")
	lines := append([]string{
		"# Written by gcefake: point hamaster at the fake GCE project (. this file).",
		"# Removed when gcefake stops.",
		"export HAMASTER_PROVIDER=gce",
		"export HAMASTER_CLUSTER=" + cluster,
		"export HAMASTER_STATE_DIR=" + filepath.Join(state, "hamaster"),
		"export HAMASTER_GCE_ENDPOINT=" + fake.URL,
		"export HAMASTER_GCE_PROJECT=" + c.project,
		"export HAMASTER_GCE_ZONE=" + c.zone,
		"export HAMASTER_GCE_REGION=" + region,
		"export HAMASTER_GCE_MASTER_NAME=" + master,
		"export HAMASTER_DNS_ZONE=gcefake-zone",
		"export HAMASTER_SSH_USER=hamaster",
		"export HAMASTER_SSH_KEY=" + keyFile,
		"export HAMASTER_SSH_KNOWN_HOSTS=" + fake.KnownHostsFile(),
		fmt.Sprintf("export HAMASTER_SSH_PORT=%d", gcefake.SSHPort),
	}, flavor...)
	lines = append(lines, "# Not hamaster's: "+note+".")
	lines = append(lines, notHamaster...)
	env := strings.Join(append(lines, ""), "\n")
	if err := os.WriteFile(envFile+".tmp", []byte(env), 0o644); err != nil {
		return "", err
	}
	return envFile, os.Rename(envFile+".tmp", envFile)
}
