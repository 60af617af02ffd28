//go:build metallab

package metallab_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

const kubeadmVersion = "v1.33.13"

// adminClient is a client of the cluster from the lab's admin.conf.
func adminClient(t *testing.T, lab *metallab.Lab) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", lab.AdminConfFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitNodesReady waits until each named Node is Ready with the kubelet
// version, and its control plane's mirror pods Running.
func waitNodesReady(ctx context.Context, t *testing.T, c kubernetes.Interface, version string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		err := wait.Until(ctx, 500*time.Millisecond, "Node "+n+" Ready with its mirror pods Running", func() (bool, error) {
			node, err := c.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			ready := false
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready = true
				}
			}
			if !ready || node.Status.NodeInfo.KubeletVersion != version {
				return false, nil
			}
			for _, comp := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				p, err := c.CoreV1().Pods("kube-system").Get(ctx, comp+"-"+n, metav1.GetOptions{})
				if err != nil || p.Status.Phase != corev1.PodRunning {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The real kubeadm init of host-1, preflight and all, on a lab host
// prepared as kubeadm's install page asks, with the test bed's kubelet
// (and its CRI) installed as the kubelet package.
func TestKubeadmInit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	o := metallabtest.KubeadmOptions(t, 1, kubeadmVersion)
	lab := metallabtest.StartKubeadm(ctx, t, o, kubeadmVersion)
	h := lab.Hosts[0]
	took, err := lab.KubeadmInit(ctx, h, metallab.KubeadmInit{Version: kubeadmVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeadm init %s on %s: %v", kubeadmVersion, h.Name, took.Round(time.Millisecond))

	c := adminClient(t, lab)
	start := time.Now()
	waitNodesReady(ctx, t, c, kubeadmVersion, h.Name)
	t.Logf("Node %s Ready, mirror pods Running %v after init", h.Name, time.Since(start).Round(time.Millisecond))

	out, err := exec.CommandContext(ctx, filepath.Join(o.BinDir, kubeadmVersion, "kubectl"), "--kubeconfig", lab.AdminConfFile, "get", "--raw", "/readyz").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("kubectl get --raw /readyz: %v: %s", err, out)
	}
	if want := metallab.APIServer(h, ""); !strings.Contains(readFile(t, lab.AdminConfFile), "server: "+want) {
		t.Errorf("admin.conf does not point at %s", want)
	}
	if env := readFile(t, lab.EnvFile); !strings.Contains(env, "export KUBECONFIG="+lab.AdminConfFile+"\n") {
		t.Errorf("hamaster.env lacks KUBECONFIG:\n%s", env)
	}
	if env := readFile(t, lab.EnvFile); !strings.Contains(env, "export HAMASTER_KUBEADM_INSTALL_COMMAND='"+metallab.InstallCommand+"'\n") {
		t.Errorf("hamaster.env lacks the install command:\n%s", env)
	}
	// The package stand-in: the installed version again is a no-op;
	// a version the lab has no build of is refused, nothing changed.
	sc, err := lab.Dial(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if out, stderr, err := sc.Run(ctx, metallab.PackageInstaller+" "+kubeadmVersion+" kubeadm kubelet kubectl && kubeadm version -o short && kubelet --version"); err != nil ||
		strings.TrimSpace(string(out)) != kubeadmVersion+"\nKubernetes "+kubeadmVersion {
		t.Errorf("%s %s: %q, %v: %s", metallab.PackageInstaller, kubeadmVersion, out, err, stderr)
	}
	if _, stderr, err := sc.Run(ctx, metallab.PackageInstaller+" v9.9.9 kubeadm"); err == nil || !strings.Contains(string(stderr), "no packages of v9.9.9") {
		t.Errorf("%s v9.9.9: %v: %s", metallab.PackageInstaller, err, stderr)
	}
	log := readFile(t, filepath.Join(h.Dir, metallab.KubeadmInitLog))
	for _, want := range []string{"[preflight] Running pre-flight checks", "Your Kubernetes control-plane has initialized successfully!"} {
		if !strings.Contains(log, want) {
			t.Errorf("kubeadm init's output lacks %q", want)
		}
	}
	if strings.Contains(log, "[WARNING") {
		t.Logf("kubeadm init's warnings:\n%s", grepLines(log, "[WARNING"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// etcdMembers lists the etcd cluster's members through host's etcd, as
// kubeadm's own etcd client does (cmd/kubeadm/app/util/etcd: the
// healthcheck-client certificate of /etc/kubernetes/pki/etcd), the
// certificates read from the host's /etc/kubernetes (the lab's files).
func etcdMembers(ctx context.Context, t *testing.T, h *metallab.Host) []*etcdserverpb.Member {
	t.Helper()
	cli := etcdClient(t, h)
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.MemberList(lctx)
	if err != nil {
		t.Fatalf("etcd member list via %s: %v", h.Name, err)
	}
	return resp.Members
}

// etcdClient is a client of h's etcd member, with the certificate
// kubeadm issues for etcd's health checks.
func etcdClient(t *testing.T, h *metallab.Host) *clientv3.Client {
	t.Helper()
	pki := filepath.Join(h.Dir, "etc-kubernetes", "pki", "etcd")
	tlsCfg, err := (transport.TLSInfo{CertFile: filepath.Join(pki, "healthcheck-client.crt"), KeyFile: filepath.Join(pki, "healthcheck-client.key"),
		TrustedCAFile: filepath.Join(pki, "ca.crt")}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + net.JoinHostPort(h.Addr.String(), "2379")}, TLS: tlsCfg,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// removeEtcdMember removes the member named name through h's etcd, as
// kubeadm reset tells the operator to when its remove-etcd-member phase
// failed ("please manually remove this etcd member using etcdctl"),
// asking again while etcd refuses the change (etcd refuses to remove a
// member while the one left has not been heard from lately: "not enough
// started members"), within ctx.
func removeEtcdMember(ctx context.Context, t *testing.T, h *metallab.Host, name string) {
	t.Helper()
	cli := etcdClient(t, h)
	defer cli.Close()
	if err := wait.Until(ctx, time.Second, "etcd member "+name+" removed via "+h.Name, func() (bool, error) {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := cli.MemberList(lctx)
		if err != nil {
			t.Logf("etcd member list via %s: %v", h.Name, err)
			return false, nil
		}
		for _, m := range resp.Members {
			if m.Name == name {
				if _, err := cli.MemberRemove(lctx, m.ID); err != nil {
					t.Logf("etcd member remove %s (%x) via %s: %v", name, m.ID, h.Name, err)
				}
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// runLogged runs cmd on c with its output in the lab's file log (which
// the host sees at the same path), failing the test with its end.
func runLogged(ctx context.Context, t *testing.T, c *remote.Client, cmd, log string) time.Duration {
	t.Helper()
	start := time.Now()
	_, stderr, err := c.Run(ctx, fmt.Sprintf("%s > '%s' 2>&1", cmd, log))
	took := time.Since(start)
	if err != nil {
		b, _ := os.ReadFile(log)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Fatalf("%s: %s after %v: %v %s; its output:\n%s", c.Addr(), cmd, took.Round(time.Millisecond), err, stderr, b)
	}
	return took
}

// The control-plane join in the lab, by hand as kubeadm's HA guide has
// an operator do it
// (https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/high-availability/):
// init host-1 with controlPlaneEndpoint the VIP (held by host-1 with ip
// addr add: no keepalived here), the join command and certificate key
// from host-1, kubeadm join --control-plane on host-2; then host-2
// removed as kubeadm's docs remove a node (kubectl drain, kubeadm reset,
// kubectl delete node): reset's remove-etcd-member phase removes its
// etcd member (or, when etcd refused, warns and the operator removes it
// as the warning says), its cleanup-node phase stops its pods through
// the CRI.
func TestKubeadmControlPlaneJoin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lab := metallabtest.StartKubeadm(ctx, t, metallabtest.KubeadmOptions(t, 2, kubeadmVersion), kubeadmVersion)
	h1, h2 := lab.Hosts[0], lab.Hosts[1]
	c1, c2 := dial(ctx, t, lab, h1), dial(ctx, t, lab, h2)
	run(ctx, t, c1, fmt.Sprintf("ip addr add %s/24 dev eth0", lab.VIP))
	endpoint := lab.VIPEndpoint()
	initTook, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: kubeadmVersion, ControlPlaneEndpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	if want := metallab.APIServer(h1, endpoint); !strings.Contains(readFile(t, lab.AdminConfFile), "server: "+want) {
		t.Errorf("admin.conf does not point at %s", want)
	}

	// What the HA guide has the operator run on the first master.
	join := run(ctx, t, c1, "kubeadm token create --print-join-command")
	if !strings.HasPrefix(join, "kubeadm join "+endpoint+" ") {
		t.Fatalf("join command %q does not join %s", join, endpoint)
	}
	// With init's config: without it, kubeadm defaults one, whose
	// advertise address it cannot pick in the lab (no default route):
	// "cannot use "0.0.0.0" as the bind address for the API Server".
	upload := strings.Split(run(ctx, t, c1, "kubeadm init phase upload-certs --upload-certs --config "+metallab.InitConfigPath), "\n")
	key := strings.TrimSpace(upload[len(upload)-1])
	if len(key) != 64 {
		t.Fatalf("no certificate key in upload-certs' output: %q", upload)
	}
	// No default route in the lab: kubeadm cannot pick the host's
	// address itself (it chooses from the default route's interface).
	joinTook := runLogged(ctx, t, c2, fmt.Sprintf("%s --control-plane --certificate-key %s --apiserver-advertise-address %s", join, key, h2.Addr),
		filepath.Join(h2.Dir, "kubeadm-join.log"))

	c := adminClient(t, lab)
	waitNodesReady(ctx, t, c, kubeadmVersion, h1.Name, h2.Name)
	members := etcdMembers(ctx, t, h1)
	if len(members) != 2 {
		t.Fatalf("etcd members after the join: %v, want 2", members)
	}
	for _, m := range members {
		if m.IsLearner {
			t.Errorf("etcd member %s is still a learner: kubeadm join promotes it", m.Name)
		}
	}
	t.Logf("host-2 joined: 2 etcd voters (%s, %s), 2 Nodes Ready", members[0].Name, members[1].Name)

	// Remove host-2 as kubeadm's docs remove a node.
	run(ctx, t, c1, "kubectl --kubeconfig /etc/kubernetes/admin.conf drain host-2 --ignore-daemonsets --delete-emptydir-data --force --timeout=60s")
	resetLog := filepath.Join(h2.Dir, "kubeadm-reset.log")
	resetTook := runLogged(ctx, t, c2, "kubeadm reset -f", resetLog)
	// reset only warns when its remove-etcd-member phase fails
	// (cmd/kubeadm/app/cmd/phases/reset/removeetcdmember.go: "[reset]
	// Failed to remove etcd member: %v, please manually remove this etcd
	// member using etcdctl"); the operator then does as it says.
	if out := readFile(t, resetLog); strings.Contains(out, "Failed to remove etcd member") {
		t.Logf("kubeadm reset could not remove host-2's etcd member; removing it as reset says:\n%s", out)
		removeEtcdMember(ctx, t, h1, h2.Name)
	}
	if m := etcdMembers(ctx, t, h1); len(m) != 1 || m[0].Name != h1.Name {
		t.Fatalf("etcd members after kubeadm reset of host-2: %v, want host-1 only; kubeadm reset's output:\n%s", m, readFile(t, resetLog))
	}
	for _, d := range []string{"etc-kubernetes/manifests", "var-lib-etcd"} {
		ents, err := os.ReadDir(filepath.Join(h2.Dir, d))
		if err != nil || len(ents) != 0 {
			t.Errorf("host-2's %s after kubeadm reset: %v, %v; want it empty", d, ents, err)
		}
	}
	t.Logf("kubeadm reset's output:\n%s", readFile(t, resetLog))
	// cleanup-node stopped the four static pods through the CRI.
	if n := strings.Count(readFile(t, filepath.Join(h2.Dir, "kubelet.log")), "static pod stopped through the runtime endpoint"); n != 4 {
		t.Errorf("host-2's kubelet stopped %d pods through the runtime endpoint, want 4 (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)", n)
	}
	// kubeadm reset cannot stop a kubelet without an init system it
	// knows: the operator does (systemctl stop kubelet).
	lab.StopKubelet(h2)
	run(ctx, t, c1, "kubectl --kubeconfig /etc/kubernetes/admin.conf delete node host-2")
	if err := wait.Until(ctx, 200*time.Millisecond, "Node host-2 gone", func() (bool, error) {
		_, err := c.CoreV1().Nodes().Get(ctx, h2.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}
	if out := run(ctx, t, c1, "kubectl --kubeconfig /etc/kubernetes/admin.conf get --raw /readyz"); out != "ok" {
		t.Errorf("host-1's apiserver after host-2's removal: /readyz %q", out)
	}
	t.Logf("kubeadm init %v, join --control-plane %v, reset %v", initTook.Round(time.Millisecond), joinTook.Round(time.Millisecond), resetTook.Round(time.Millisecond))
}
