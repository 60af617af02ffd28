//go:build metallab

package kubeadm_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors/flavortest"
	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/internal/probeload"
	"github.com/hamaster/hamaster/internal/wait"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/metal/vip"
	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/testbed/metal/metallab"
	"github.com/hamaster/hamaster/testbed/metal/metallab/metallabtest"
)

// TestConvertToHA converts a single kubeadm master (kubeadm init, no
// controlPlaneEndpoint) to HA on the VIP with the flavor's
// EndpointMover, each method run twice, while load runs on the master's
// own address (throughout) and on the VIP (once the certificate names
// it): AddServingSANs reissues the apiserver certificate with the
// real kubeadm and the running apiserver serves it without a restart
// (same pid); SetEndpoint records the VIP in kubeadm-config and
// cluster-info; PointConsumers moves kube-proxy's kubeconfig in its
// ConfigMap (kubeadm's signature renewed) and rolls its DaemonSet exactly
// once across a run that stopped after the move and one that stopped
// before clearing its mark; PointMaster moves the kubeconfigs; Pinned
// names what is left on host-1 at each stage. Then a second host
// joins through the flavor's Join and a third by hand with the command
// `kubeadm token create --print-join-command` prints (plus
// --control-plane and the key upload-certs prints): both read the VIP
// from cluster-info and join. When the lab hosts have the systemctl
// stand-in (the test bed's kubelet that keeps its pods across a
// restart), PointMaster also moves a kubelet.conf on an old endpoint and
// restarts the kubelet, within the load. 0 failed requests on either
// address, and the apiserver's pid the same from start to end.
func TestConvertToHA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	lab, p, run := kubeadmHosts(ctx, t, metallabtest.KubeadmOptions(t, 3, labVersion), "/usr/sbin/keepalived", "/usr/sbin/haproxy", "curl")
	h1, h2, h3 := lab.Hosts[0], lab.Hosts[1], lab.Hosts[2]
	if _, err := lab.KubeadmInit(ctx, h1, metallab.KubeadmInit{Version: labVersion}); err != nil {
		t.Fatal(err)
	}
	f, err := kubeadm.New(p, slog.New(slog.NewTextHandler(testLog{t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	registry.Attach(p, f)
	r1, err := p.Instances().Get(ctx, h1.Name)
	if err != nil {
		t.Fatal(err)
	}
	if ep, err := f.Endpoint(ctx); err != nil || ep != "" {
		t.Fatalf("Endpoint of a master built without controlPlaneEndpoint = %q, %v; want \"\"", ep, err)
	}
	vipHost := lab.VIP.String()
	endpoint := net.JoinHostPort(vipHost, "8443")
	for _, name := range []string{"admin.conf", "super-admin.conf", "kubelet.conf", "controller-manager.conf", "scheduler.conf"} {
		t.Logf("before: %s server %s", name, run(h1.Name, "grep server: /etc/kubernetes/"+name))
	}
	// kube-proxy as kubeadm init rendered it: its kubeconfig on
	// host-1's own address, the ConfigMap signed by kubeadm with the
	// checksum hamaster computes (componentconfigs/checksums.go).
	kubeProxyCM := func() map[string]any {
		t.Helper()
		var cm map[string]any
		if err := json.Unmarshal([]byte(run(h1.Name, kubectlAdmin+"-n kube-system get configmap kube-proxy -o json")), &cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	cmKubeconfigServer := func(cm map[string]any) string {
		t.Helper()
		doc, _ := cm["data"].(map[string]any)[kubeadm.KubeProxyKubeconfigKey].(string)
		srv, err := kubeadm.KubeconfigServer([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	cmAnnotation := func(cm map[string]any, key string) string {
		a, _ := cm["metadata"].(map[string]any)["annotations"].(map[string]any)
		v, _ := a[key].(string)
		return v
	}
	dsGeneration := func() string {
		t.Helper()
		return run(h1.Name, kubectlAdmin+"-n kube-system get daemonset kube-proxy -o jsonpath='{.metadata.generation}'")
	}
	cm0 := kubeProxyCM()
	t.Logf("kube-proxy ConfigMap as kubeadm init wrote it: %s", run(h1.Name, kubectlAdmin+"-n kube-system get configmap kube-proxy -o json"))
	if srv := cmKubeconfigServer(cm0); srv != "https://"+net.JoinHostPort(h1.Addr.String(), "6443") {
		t.Errorf("kube-proxy's kubeconfig before the conversion names %s; want host-1's own address", srv)
	}
	if sum, err := kubeadm.ConfigMapChecksum(cm0); err != nil || sum != cmAnnotation(cm0, kubeadm.AnnotationComponentConfigHash) {
		t.Errorf("kubeadm's signature of kube-proxy's ConfigMap %q; hamaster computes %q, %v", cmAnnotation(cm0, kubeadm.AnnotationComponentConfigHash), sum, err)
	}
	gen0 := dsGeneration()
	if pins, err := f.Pinned(ctx); err != nil || len(pins) > 0 {
		t.Errorf("Pinned of a master that records no endpoint = %v, %v; want none", pins, err)
	}

	// The VIP on host-1: keepalived and HAProxy as its units (the lab's
	// systemctl stand-in runs them), VIP:8443 → host-1:6443.
	c1, err := lab.Dial(ctx, h1)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	vh := vip.Host{Name: h1.Name, Exec: c1}
	if _, err := vip.Apply(ctx, vh, vip.Config{VIP: vipHost, Priority: vip.DefaultPriority(0, 1), Host: h1.Name,
		Masters: []vip.Master{{Name: h1.Name, Address: h1.Addr.String()}}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if err := vip.Remove(cctx, vh, vipHost); err != nil {
			t.Errorf("vip.Remove: %v", err)
		}
	}()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := wait.Until(wctx, 100*time.Millisecond, "the VIP's frontend "+endpoint, func() (bool, error) {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(wctx, "tcp", endpoint)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(run(h1.Name, "cat "+kubeadm.CACert))) {
		t.Fatal("no CA")
	}
	tlsCfg := func() *tls.Config { return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12} }
	oldURL := fmt.Sprintf("https://%s/readyz", net.JoinHostPort(h1.Addr.String(), "6443"))
	vipURL := fmt.Sprintf("https://%s/readyz", endpoint)
	oldLoad := probeload.Start(ctx, oldURL, tlsCfg(), 20*time.Millisecond)
	served := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", net.JoinHostPort(h1.Addr.String(), "6443"), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	sans := func(c *x509.Certificate) []string {
		out := slices.Clone(c.DNSNames)
		for _, ip := range c.IPAddresses {
			out = append(out, ip.String())
		}
		return out
	}
	oldSANs := sans(served())
	pid0 := apiserverPID(t, h1)
	t.Logf("before: the apiserver (pid %d) serves %v", pid0, oldSANs)

	// AddServingSANs, twice: reissued once, then nothing to do.
	for i := range 2 {
		start := time.Now()
		if err := f.AddServingSANs(ctx, r1, vipHost); err != nil {
			t.Fatalf("AddServingSANs #%d: %v", i+1, err)
		}
		t.Logf("AddServingSANs(%s) #%d took %v", vipHost, i+1, time.Since(start).Round(time.Millisecond))
	}
	got := sans(served())
	if miss := kubeadm.MissingSANs(got, append(slices.Clone(oldSANs), vipHost)...); len(miss) > 0 {
		t.Errorf("the served certificate %v lacks %v", got, miss)
	}
	file, _ := pem.Decode([]byte(run(h1.Name, "cat "+kubeadm.APIServerCert)))
	if fc, err := x509.ParseCertificate(file.Bytes); err != nil || !fc.Equal(served()) {
		t.Errorf("the apiserver serves another certificate than %s (%v)", kubeadm.APIServerCert, err)
	}
	if pid := apiserverPID(t, h1); pid != pid0 {
		t.Errorf("the apiserver restarted for its new certificate: pid %d, was %d", pid, pid0)
	}
	// The staging directory (with its CA key copy) is gone; the backup
	// is the pair replaced.
	if left := run(h1.Name, "ls -A /var/lib/hamaster/apiserver-cert-staging 2>/dev/null; ls /etc/kubernetes/pki/*.hamaster-tmp 2>/dev/null || true"); left != "" {
		t.Errorf("left after the reissue: %s", left)
	}
	if bk, _ := pem.Decode([]byte(run(h1.Name, "cat /var/lib/hamaster/apiserver-cert-backup/apiserver.crt"))); bk == nil {
		t.Error("no backup of the replaced certificate")
	} else if bc, err := x509.ParseCertificate(bk.Bytes); err != nil || !slices.Equal(sans(bc), oldSANs) {
		t.Errorf("the backup names %v (%v), the replaced certificate %v", sans(bc), err, oldSANs)
	}
	vipLoad := probeload.Start(ctx, vipURL, tlsCfg(), 20*time.Millisecond)

	for i := range 2 {
		start := time.Now()
		if err := f.SetEndpoint(ctx, endpoint); err != nil {
			t.Fatalf("SetEndpoint #%d: %v", i+1, err)
		}
		t.Logf("SetEndpoint(%s) #%d took %v", endpoint, i+1, time.Since(start).Round(time.Millisecond))
	}
	if ep, err := f.Endpoint(ctx); err != nil || ep != endpoint {
		t.Errorf("Endpoint after SetEndpoint = %q, %v; want %q", ep, err, endpoint)
	}
	_, cc, err := f.ClusterConfigurationOf(ctx, h1.Name)
	if err != nil || !slices.Contains(cc.APIServer.CertSANs, vipHost) {
		t.Errorf("kubeadm-config certSANs %v (%v); want %s among them", cc.APIServer.CertSANs, err, vipHost)
	}
	ci := run(h1.Name, "kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-public get cm cluster-info -o jsonpath='{.data.kubeconfig}'")
	if srv, err := kubeadm.KubeconfigServer([]byte(ci)); err != nil || srv != "https://"+endpoint {
		t.Errorf("cluster-info server %q, %v; want https://%s", srv, err, endpoint)
	}

	// The endpoint recorded, nothing moved yet: kube-proxy and host-1's
	// admin.conf and super-admin.conf still name host-1 (status lists
	// them), the fix is the conversion again.
	pinsOf := func() []string {
		t.Helper()
		pins, err := f.Pinned(ctx)
		if err != nil {
			t.Fatalf("Pinned: %v", err)
		}
		var out []string
		for _, p := range pins {
			out = append(out, p.Consumer+"@"+p.On+"→"+p.Master)
			if p.Fix != "hamaster endpoint set --yes "+endpoint {
				t.Errorf("pin %v: fix %q", p, p.Fix)
			}
		}
		return out
	}
	if got, want := pinsOf(), []string{"kube-system/kube-proxy ConfigMap kubeconfig.conf@→host-1", "/etc/kubernetes/admin.conf@host-1→host-1", "/etc/kubernetes/super-admin.conf@host-1→host-1"}; !slices.Equal(got, want) {
		t.Errorf("pinned after SetEndpoint:\n got %q\nwant %q", got, want)
	}

	// PointConsumers: kube-proxy's ConfigMap moved to the VIP and its
	// DaemonSet rolled once. First as a run that stopped right after the
	// ConfigMap's replace (the move done by hand with the flavor's own
	// edit, the roll not): the next PointConsumers rolls; the one after
	// it, and one after a run that stopped after the roll but before
	// the mark's removal, do not roll again.
	moved := kubeProxyCM()
	if changed, err := kubeadm.EditKubeProxyConfigMap(moved, "https://"+endpoint); err != nil || !changed {
		t.Fatalf("EditKubeProxyConfigMap: %v, %v", changed, err)
	}
	body, err := json.Marshal(moved)
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := p.RunOnMachine(ctx, h1.Name, remote.WriteFileScript("/var/lib/hamaster/kube-proxy-moved.json", body, 0o600)); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	run(h1.Name, kubectlAdmin+"replace -f /var/lib/hamaster/kube-proxy-moved.json && rm -f /var/lib/hamaster/kube-proxy-moved.json")
	if g := dsGeneration(); g != gen0 {
		t.Fatalf("kube-proxy's DaemonSet at generation %s after the ConfigMap's move alone; was %s", g, gen0)
	}
	if got := pinsOf(); !slices.Contains(got, "kube-system/kube-proxy pods (started before kubeconfig.conf moved; not rolled yet)@→host-1") {
		t.Errorf("pinned with kube-proxy moved but not rolled: %q", got)
	}
	// The test bed's kubelet runs no DaemonSet pod; it confirms a
	// deleted one's deletion as a kubelet does (docs/kubelet.md), so the
	// DaemonSet controller's roll completes as on real nodes.
	for i := range 2 {
		start := time.Now()
		if err := f.PointConsumers(ctx, endpoint); err != nil {
			t.Fatalf("PointConsumers #%d: %v", i+1, err)
		}
		t.Logf("PointConsumers(%s) #%d took %v", endpoint, i+1, time.Since(start).Round(time.Millisecond))
	}
	run(h1.Name, kubectlAdmin+"-n kube-system annotate configmap kube-proxy "+kubeadm.AnnotationRollPending+"=https://"+net.JoinHostPort(h1.Addr.String(), "6443"))
	pcStart := time.Now()
	if err := f.PointConsumers(ctx, endpoint); err != nil {
		t.Fatalf("PointConsumers after a run that stopped before clearing its mark: %v", err)
	}
	t.Logf("PointConsumers after a run that stopped before clearing its mark took %v", time.Since(pcStart).Round(time.Millisecond))
	cm1 := kubeProxyCM()
	if srv := cmKubeconfigServer(cm1); srv != "https://"+endpoint {
		t.Errorf("kube-proxy's kubeconfig names %s after PointConsumers; want https://%s", srv, endpoint)
	}
	if sum, _ := kubeadm.ConfigMapChecksum(cm1); sum != cmAnnotation(cm1, kubeadm.AnnotationComponentConfigHash) || sum == cmAnnotation(cm0, kubeadm.AnnotationComponentConfigHash) {
		t.Errorf("kube-proxy's ConfigMap signed %q after the move; want its new checksum %q", cmAnnotation(cm1, kubeadm.AnnotationComponentConfigHash), sum)
	}
	if m := cmAnnotation(cm1, kubeadm.AnnotationRollPending); m != "" {
		t.Errorf("the roll mark %q is left on kube-proxy's ConfigMap", m)
	}
	g0, _ := strconv.Atoi(gen0)
	if g := dsGeneration(); g != strconv.Itoa(g0+1) {
		t.Errorf("kube-proxy's DaemonSet at generation %s; want %d: rolled exactly once (from %d)", g, g0+1, g0)
	}
	if a := run(h1.Name, kubectlAdmin+"-n kube-system get daemonset kube-proxy -o jsonpath='{.spec.template.metadata.annotations}'"); !strings.Contains(a, `"`+kubeadm.AnnotationKubeconfigServer+`":"https://`+endpoint+`"`) {
		t.Errorf("kube-proxy's pod template annotations %s; want %s=https://%s", a, kubeadm.AnnotationKubeconfigServer, endpoint)
	}
	t.Logf("kube-proxy's DaemonSet: %s", run(h1.Name, kubectlAdmin+"-n kube-system get daemonset kube-proxy -o jsonpath='generation {.metadata.generation}, observed {.status.observedGeneration}, desired {.status.desiredNumberScheduled}, updated {.status.updatedNumberScheduled}'"))

	for i := range 2 {
		start := time.Now()
		if err := f.PointMaster(ctx, r1, "https://"+endpoint); err != nil {
			t.Fatalf("PointMaster #%d: %v", i+1, err)
		}
		t.Logf("PointMaster #%d took %v", i+1, time.Since(start).Round(time.Millisecond))
	}
	for _, name := range []string{"admin.conf", "super-admin.conf", "kubelet.conf", "controller-manager.conf", "scheduler.conf"} {
		srv := run(h1.Name, "grep server: /etc/kubernetes/"+name)
		t.Logf("after: %s %s", name, srv)
		moved := strings.Contains(srv, endpoint)
		if wantMoved := name == "admin.conf" || name == "super-admin.conf"; moved != wantMoved {
			t.Errorf("%s: %s; moved to the endpoint: %v, want %v", name, srv, moved, wantMoved)
		}
	}
	if ep := run(h1.Name, "kubectl --kubeconfig /etc/kubernetes/admin.conf get --raw /readyz"); ep != "ok" {
		t.Errorf("kubectl through the VIP: %q", ep)
	}
	if got := pinsOf(); len(got) > 0 {
		t.Errorf("pinned after the conversion: %q", got)
	}

	// PointMaster's kubelet path: a kubelet.conf that names an old
	// endpoint (here the master's DNS name, as on a master that joined
	// through one) moves too, and the kubelet restarts — keeping the
	// master's pods (same apiserver pid). It needs the lab hosts'
	// systemctl stand-in (branch kubelet-keep).
	kubeletRestarted := false
	if _, _, err := p.RunOnMachine(ctx, h1.Name, "systemctl is-active kubelet"); err != nil {
		t.Logf("no working systemctl on the lab hosts (%v): PointMaster's kubelet restart not exercised", err)
	} else {
		run(h1.Name, "sed -i 's#server: https://"+h1.Addr.String()+":6443#server: https://"+h1.Name+":6443#' /etc/kubernetes/kubelet.conf")
		for i := range 2 {
			start := time.Now()
			if err := f.PointMaster(ctx, r1, "https://"+endpoint); err != nil {
				t.Fatalf("PointMaster of a kubelet.conf on the old endpoint #%d: %v", i+1, err)
			}
			t.Logf("PointMaster of a kubelet.conf on the old endpoint #%d took %v", i+1, time.Since(start).Round(time.Millisecond))
		}
		if srv := run(h1.Name, "grep server: /etc/kubernetes/kubelet.conf"); !strings.Contains(srv, "https://"+endpoint) {
			t.Errorf("kubelet.conf on the old endpoint: %s after PointMaster", srv)
		}
		if left := run(h1.Name, "ls /var/lib/hamaster/kubelet-restart-pending 2>/dev/null || true"); left != "" {
			t.Errorf("the kubelet restart mark is left: %s", left)
		}
		// A PointMaster that stopped after moving kubelet.conf, before
		// the restart: the next one restarts the kubelet.
		run(h1.Name, "echo https://"+endpoint+" > /var/lib/hamaster/kubelet-restart-pending")
		if err := f.PointMaster(ctx, r1, "https://"+endpoint); err != nil {
			t.Fatalf("PointMaster after a crash before the kubelet's restart: %v", err)
		}
		if left := run(h1.Name, "ls /var/lib/hamaster/kubelet-restart-pending 2>/dev/null || true"); left != "" {
			t.Errorf("PointMaster after a crash before the kubelet's restart left the mark: %s", left)
		}
		kubeletRestarted = true
	}

	// host-2 joins through the flavor: kubeadm join reads the VIP from
	// kubeadm-config and cluster-info.
	claim := func(h *metallab.Host) providers.Replica { t.Helper(); return claimHost(ctx, t, p, h) }
	start := time.Now()
	r2 := claim(h2)
	if err := f.Join(ctx, r2, 0); err != nil {
		t.Fatalf("Join(host-2) after the conversion: %v", err)
	}
	t.Logf("Join(host-2) took %v", time.Since(start).Round(time.Millisecond))
	// What a resumed add asks: host-2's join ended with its Node marked a
	// control plane; host-3, claimed and never joined, has none.
	r3 := claim(h3)
	for _, c := range []struct {
		r    providers.Replica
		want bool
	}{{r2, true}, {r3, false}} {
		if got, err := f.Joined(ctx, c.r, time.Minute); err != nil || got != c.want {
			t.Errorf("Joined(%s) = %v, %v; want %v", c.r.Name, got, err, c.want)
		}
	}

	// host-3 by hand, as the operator would: the printed join command,
	// --control-plane and the certificate key upload-certs prints.
	joinCmd := run(h1.Name, "kubeadm token create --print-join-command")
	if !strings.HasPrefix(joinCmd, "kubeadm join "+endpoint+" ") {
		t.Errorf("the printed join command does not name the endpoint: %s", joinCmd)
	}
	lines := strings.Split(run(h1.Name, "kubeadm init phase upload-certs --upload-certs"), "\n")
	key := strings.TrimSpace(lines[len(lines)-1])
	start = time.Now()
	out, stderr, err := p.RunOnMachine(ctx, h3.Name, fmt.Sprintf("%s --control-plane --certificate-key %s --node-name %s --apiserver-advertise-address %s",
		joinCmd, key, h3.Name, h3.Addr))
	if err != nil {
		t.Fatalf("kubeadm join by hand on host-3: %v\n%s\n%s", err, out, stderr)
	}
	t.Logf("kubeadm join by hand on host-3 took %v", time.Since(start).Round(time.Millisecond))
	// kubeadm-config's endpoint is what the joined masters' admin.conf
	// names (kubeadm join --control-plane writes it from the
	// controlPlaneEndpoint).
	for _, h := range []*metallab.Host{h2, h3} {
		if srv := run(h.Name, "grep server: /etc/kubernetes/admin.conf"); !strings.Contains(srv, "https://"+endpoint) {
			t.Errorf("%s's admin.conf: %s; want https://%s", h.Name, srv, endpoint)
		}
	}

	old, vipRes := oldLoad.Stop(), vipLoad.Stop()
	t.Logf("load on %s (from before AddServingSANs to after both joins): %+v", oldURL, old)
	t.Logf("load on %s (from after AddServingSANs to after both joins): %+v", vipURL, vipRes)
	failed := probeload.Failed(old) + probeload.Failed(vipRes)
	if old["new"].Requests == 0 || old["kept-alive"].Requests == 0 || vipRes["new"].Requests == 0 || vipRes["kept-alive"].Requests == 0 {
		t.Errorf("a load sent no request: %+v %+v", old, vipRes)
	}
	if failed > 0 {
		t.Errorf("%d requests failed", failed)
	}
	if pid := apiserverPID(t, h1); pid != pid0 {
		if kubeletRestarted {
			t.Errorf("host-1's apiserver pid %d, was %d: the kubelet's restart stopped it", pid, pid0)
		} else {
			t.Errorf("host-1's apiserver pid %d, was %d", pid, pid0)
		}
	}

	// Three voters, and the joined masters' certificates name the VIP.
	flavortest.Voters(ctx, t, f, 3) // after the two joins
	for _, h := range []*metallab.Host{h2, h3} {
		b, _ := pem.Decode([]byte(run(h.Name, "cat "+kubeadm.APIServerCert)))
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if miss := kubeadm.MissingSANs(sans(c), vipHost, h.Addr.String()); len(miss) > 0 {
			t.Errorf("%s's apiserver certificate lacks %v", h.Name, miss)
		}
	}
	if n := run(h1.Name, "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o name | sort | tr '\\n' ' '"); n != "node/host-1 node/host-2 node/host-3" {
		t.Errorf("Nodes: %q", n)
	}
	// Nothing names one master after the joins: remove-replica may take
	// any of them.
	if v, err := f.View(ctx); err != nil || len(v.Pinned) > 0 || v.PinnedError != "" {
		t.Errorf("View after the joins: pinned %v (%s), %v", v.Pinned, v.PinnedError, err)
	}
}

// kubectlAdmin runs kubectl on a master with kubeadm's admin.conf.
const kubectlAdmin = "kubectl --kubeconfig /etc/kubernetes/admin.conf "

// apiserverPID is the pid of the kube-apiserver process in h's network
// namespace (the hosts share the machine's pid namespace).
func apiserverPID(t *testing.T, h *metallab.Host) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", h.NS).Output()
	if err != nil {
		t.Fatalf("ip netns pids %s: %v", h.NS, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		comm, err := os.ReadFile("/proc/" + f + "/comm")
		if err == nil && strings.TrimSpace(string(comm)) == "kube-apiserver" {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("%s: kube-apiserver pids %v; want one", h.Name, pids)
	}
	return pids[0]
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
