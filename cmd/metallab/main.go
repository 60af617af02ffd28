// Command metallab builds a lab of bare-metal hosts on this machine to
// rehearse hamaster's metal provider against: network namespaces on one
// bridge, each with its own sshd and its own /etc/kubernetes, /var/lib and
// /run. See usage below and docs/metal.md, "The lab: bare metal without
// machines".
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/hamaster/hamaster/testbed/kubeadmhost"
	"github.com/hamaster/hamaster/testbed/kubelet"
	"github.com/hamaster/hamaster/testbed/labcmd"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/slowlogin"
)

const usage = `usage: metallab --hosts N --state DIR [flags]
       metallab --cleanup DIR

metallab builds N bare-metal hosts on this machine and runs until SIGINT
or SIGTERM. Each host is a network namespace, host-<i> at 198.18.T.<i> on
one Linux bridge (VRRP works between them), running its own OpenSSH sshd
on port 22 in a mount namespace of its own: its own hostname,
/etc/hosts, /etc/kubernetes, /var/lib/etcd, /var/lib/kubelet and /run.
Logins with DIR/id_ed25519 only: the inventory's user, labop, not root,
with passwordless sudo (hamaster runs every command through sudo -n), and
root for inspection. As on a real host with a heavy shell setup, every
SSH session takes --login-delay to start (default: a second). This machine reaches the hosts at
198.18.T.254; 198.18.T.100 is left free for the VIP. Nothing leaves the
machine.

When every host answers SSH it writes DIR/known_hosts (each host's key
under its address), DIR/inventory.yaml (hamaster's --metal-inventory
format) and DIR/hamaster.env (export HAMASTER_... lines that point
hamaster at the lab), prints them, and waits. On SIGINT or SIGTERM it
stops every process in the hosts and removes every namespace, interface,
mount point it made and file it wrote. Killed (SIGKILL), its sshds die
with it but its namespaces stay: metallab --cleanup DIR removes them, as
does the next metallab with the same --state. It needs root, iproute2's
ip, util-linux's unshare and OpenSSH's sshd.

  terminal 1:  sudo bin/metallab --hosts 4 --state /tmp/lab
  terminal 2:  sudo -s
               . /tmp/lab/hamaster.env
               ssh -i $HAMASTER_SSH_KEY -o UserKnownHostsFile=$HAMASTER_SSH_KNOWN_HOSTS labop@198.18.T.1

With --kubeadm-master VERSION it then makes host-1 a kubeadm master as
an operator would: on every host it "installs the packages" (kubeadm and
kubectl of VERSION from --bin-dir, and the test bed's kubelet,
hamaster-kubelet, as the kubelet service, which also serves the
container runtime endpoint kubeadm talks to), then runs the real
'kubeadm init --config' on host-1 over SSH (advertiseAddress host-1's,
no controlPlaneEndpoint: the common single master; no preflight check
skipped), its output in DIR/hosts/host-1/kubeadm-init.log, and copies
its admin.conf to DIR/admin.conf (KUBECONFIG in DIR/hamaster.env):

  sudo bin/metallab --hosts 3 --state /tmp/lab --kubeadm-master v1.33.13
  . /tmp/lab/hamaster.env; kubectl get nodes   # kubectl of VERSION: --bin-dir

The other hosts have the packages installed, ready for kubeadm join.

With --workers N the last N hosts are the inventory's workers (role:
worker: never a master) and, with --kubeadm-master, each joins host-1's
cluster as a worker the way kubeadm's docs have it done ('kubeadm token
create --print-join-command' on host-1, run on the worker), before any
conversion: its kubelet.conf names host-1's own address until hamaster's
conversion moves it to the VIP:

  sudo bin/metallab --hosts 4 --workers 1 --state /tmp/lab --kubeadm-master v1.33.13

flags:
`

// config is the parsed command line.
type config struct {
	hosts, workers                            int
	state, cleanup, subnet, logLevel, kubeadm string
	kubelet, binDir                           string
	third                                     int
	loginDelay                                time.Duration
}

func main() {
	labcmd.Main(run)
}

func parse(args []string, stderr io.Writer) (config, int, error) {
	var c config
	fs := labcmd.FlagSet("metallab", usage, stderr)
	fs.IntVar(&c.hosts, "hosts", 0, fmt.Sprintf("how many hosts, `N` 1..%d (required)", metallab.MaxHosts))
	fs.IntVar(&c.workers, "workers", 0, "how many of the hosts, `N`, the last ones, are workers (role: worker; joined as workers with --kubeadm-master)")
	fs.StringVar(&c.state, "state", "", "`DIR` for the lab's files and hamaster.env (required; created if missing; not under /run, /etc/kubernetes or /var/lib/{etcd,kubelet})")
	fs.StringVar(&c.cleanup, "cleanup", "", "remove what a killed metallab recorded in `DIR` (its --state), then exit")
	fs.StringVar(&c.subnet, "subnet", "", fmt.Sprintf("the lab's `CIDR`, 198.18.T.0/24 with T 1..%d (default: a free one)", metallab.MaxThird))
	fs.StringVar(&c.kubeadm, "kubeadm-master", "", "install kubeadm, kubectl and the kubelet of `VERSION` (e.g. v1.33.13) on every host and kubeadm init host-1")
	fs.StringVar(&c.kubelet, "kubelet", "", "the test bed's kubelet `PROGRAM` installed by --kubeadm-master (default: hamaster-kubelet next to this executable, then $PATH)")
	fs.StringVar(&c.binDir, "bin-dir", "", "`DIR` of the real binaries, DIR/VERSION/kubeadm... ('make kube-apiserver'; default $HAMASTER_REAL_APISERVER_DIR, else ~/.cache/hamaster/kube-apiserver)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	delay := fs.String("login-delay", "", "how long every SSH session takes to start, a `DURATION` from 0 to 1m (default $"+slowlogin.Env+", else 1s): a real host's shell setup")
	if code, err := labcmd.Parse(fs, args); err != nil {
		return c, code, err
	}
	if *delay != "" {
		d, err := slowlogin.Parse("--login-delay", *delay)
		if err != nil {
			return c, 2, err
		}
		// 0 asks for none: the lab's Options say that with a negative.
		c.loginDelay = cmp.Or(d, -1)
	}
	if c.kubeadm != "" {
		if _, err := kubelet.ParseVersion(c.kubeadm); err != nil {
			return c, 2, fmt.Errorf("--kubeadm-master %q: %v", c.kubeadm, err)
		}
	} else if c.kubelet != "" || c.binDir != "" {
		return c, 2, errors.New("--kubelet and --bin-dir go with --kubeadm-master")
	}
	if c.cleanup != "" {
		if c.state != "" || c.hosts != 0 || c.subnet != "" {
			return c, 2, errors.New("--cleanup DIR takes no other lab flags")
		}
		return c, 0, nil
	}
	if c.state == "" || c.hosts == 0 {
		fs.Usage()
		return c, 2, errors.New("--hosts and --state are required")
	}
	if c.hosts < 1 || c.hosts > metallab.MaxHosts {
		return c, 2, fmt.Errorf("--hosts %d: want 1..%d", c.hosts, metallab.MaxHosts)
	}
	if c.workers < 0 || c.workers >= c.hosts {
		return c, 2, fmt.Errorf("--workers %d: want 0..%d (--hosts %d: host-1 is the master)", c.workers, c.hosts-1, c.hosts)
	}
	if c.subnet != "" {
		p, err := netip.ParsePrefix(c.subnet)
		lab := netip.MustParsePrefix("198.18.0.0/16")
		if err != nil || p.Bits() != 24 || !lab.Contains(p.Addr()) || p.Masked() != p || p.Addr().As4()[2] == 0 || p.Addr().As4()[2] > metallab.MaxThird {
			return c, 2, fmt.Errorf("--subnet %q: want 198.18.T.0/24 with T 1..%d (RFC 2544's benchmark range: nothing leaves the machine; 198.18.100 and above are the cloud fakes')", c.subnet, metallab.MaxThird)
		}
		c.third = int(p.Addr().As4()[2])
	}
	return c, 0, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, logger, code, ok := labcmd.Start("metallab", args, stderr, parse, func(c config) string { return c.logLevel })
	if !ok {
		return code
	}
	if c.cleanup != "" {
		if err := metallab.Cleanup(ctx, c.cleanup, logger); err != nil {
			fmt.Fprintf(stderr, "metallab: cleanup: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "metallab: %s: nothing of a lab left\n", c.cleanup)
		return 0
	}
	if c.kubeadm != "" {
		if err := kubeadmDefaults(&c); err != nil {
			fmt.Fprintf(stderr, "metallab: %v\n", err)
			return 2
		}
	}
	if err := serve(ctx, c, logger, stdout); err != nil {
		fmt.Fprintf(stderr, "metallab: %v\n", err)
		return 1
	}
	return 0
}

// serve runs the lab until ctx is done; every process, namespace and file
// it made is gone when it returns.
func serve(ctx context.Context, c config, logger *slog.Logger, stdout io.Writer) (err error) {
	lab, err := metallab.New(ctx, metallab.Options{Hosts: c.hosts, Dir: c.state, Third: c.third, Logger: logger, Kubelet: c.kubelet, BinDir: c.binDir, LoginDelay: c.loginDelay, Workers: c.workers})
	if err != nil {
		return err
	}
	defer func() {
		// ctx has ended (the signal): the teardown gets one that has not.
		if cerr := lab.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown (metallab --cleanup %s retries it): %w", lab.Dir, cerr))
		}
	}()
	fmt.Fprintf(stdout, "metallab: %d hosts on %v (this machine %v, VIP %v free):\n", len(lab.Hosts), lab.Subnet, lab.Operator, lab.VIP)
	for _, h := range lab.Hosts {
		fmt.Fprintf(stdout, "  %-8s %-15s namespace %s, files %s\n", h.Name, h.Addr, h.NS, h.Dir)
	}
	fmt.Fprintf(stdout, "metallab: inventory %s, known_hosts %s\n", lab.InventoryFile, lab.KnownHostsFile)
	fmt.Fprintf(stdout, "metallab: in another terminal: . %s\n", lab.EnvFile)
	fmt.Fprintf(stdout, "metallab: SSH: ssh -i %s -o UserKnownHostsFile=%s %s@%s\n", lab.ClientKeyFile, lab.KnownHostsFile, metallab.LoginUser, lab.Hosts[0].Addr)
	if c.kubeadm != "" {
		for _, h := range lab.Hosts {
			if err := lab.Install(ctx, h, c.kubeadm); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "metallab: kubeadm, kubectl and the kubelet %s installed on every host; kubeadm init on %s (log %s)\n",
			c.kubeadm, lab.Hosts[0].Name, filepath.Join(lab.Hosts[0].Dir, metallab.KubeadmInitLog))
		took, err := lab.KubeadmInit(ctx, lab.Hosts[0], metallab.KubeadmInit{Version: c.kubeadm})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "metallab: kubeadm init of %s done in %v: KUBECONFIG=%s (server %s)\n",
			lab.Hosts[0].Name, took.Round(time.Millisecond), lab.AdminConfFile, metallab.APIServer(lab.Hosts[0], ""))
		for _, h := range lab.Hosts[len(lab.Hosts)-c.workers:] {
			took, err := lab.KubeadmJoinWorker(ctx, h, lab.Hosts[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "metallab: %s joined as a worker in %v (log %s)\n", h.Name, took.Round(time.Millisecond), filepath.Join(h.Dir, metallab.KubeadmJoinWorkerLog))
		}
	}
	<-ctx.Done()
	fmt.Fprintln(stdout, "metallab: stopping: every host process, namespace and file goes")
	return nil
}

// kubeadmDefaults fills --kubelet and --bin-dir
// (kubeadmhost.FindPackages) and checks they hold what --kubeadm-master
// installs.
func kubeadmDefaults(c *config) error {
	pkgs, err := kubeadmhost.FindPackages(kubeadmhost.Packages{Kubelet: c.kubelet, KubeletFlag: "--kubelet", BinDir: c.binDir, BinDirFlag: "--bin-dir"}, c.kubeadm)
	if err != nil {
		return err
	}
	c.kubelet, c.binDir = pkgs.Kubelet, pkgs.BinDir
	return nil
}
