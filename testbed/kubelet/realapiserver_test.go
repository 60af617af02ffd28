//go:build realapiserver

// The real-apiserver tier of the kubelet: built only with -tags
// realapiserver ('make test-real'), which sets HAMASTER_REAL_APISERVER_DIR
// to the binaries 'make kube-apiserver' built (<dir>/<version>/
// kube-apiserver, kube-controller-manager).

package kubelet

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"go.etcd.io/etcd/server/v3/etcdmain"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/internal/loopbacktest"
	"github.com/hamaster/hamaster/internal/wait"
)

// TestMain lets the test binary stand in for hamaster-kubelet's etcd
// subcommand: the kubelet under test runs its etcd static pod as
// `<test binary> etcd <flags>`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == EtcdSubcommand {
		etcdmain.Main(append([]string{"etcd"}, EtcdArgs(os.Args[2:])...))
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "kubelet" {
		os.Exit(runKubeletForTest(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// runKubeletForTest is cmd/hamaster-kubelet's main for a test that runs
// the kubelet as a process (`<test binary> kubelet <flags>`).
func runKubeletForTest(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o, err := ParseFlags(args, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if o.ShowVersion { // kubeadm's preflight KubeletVersion check
		fmt.Println(VersionLine(o.Version))
		return 0
	}
	if err := Run(ctx, o, slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

const realVersion = "v1.33.13"

func realBinDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("HAMASTER_REAL_APISERVER_DIR")
	if dir == "" {
		t.Fatal("HAMASTER_REAL_APISERVER_DIR is not set: run the real-apiserver tier with 'make test-real' (it builds the binaries first)")
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(dir, realVersion, b)); err != nil {
			t.Fatalf("HAMASTER_REAL_APISERVER_DIR=%s: no %s %s (%v); run 'make kube-apiserver'", dir, b, realVersion, err)
		}
	}
	return dir
}

// The static pods, laid out as kubeadm writes them (its flags, probes and
// hostPath mounts, at the test's paths and ports).
const manifestsTmpl = `
{{define "etcd"}}apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://127.0.0.1:{{.EtcdClient}}
  labels: {component: etcd, tier: control-plane}
  name: etcd
  namespace: kube-system
spec:
  containers:
  - command:
    - etcd
    - --advertise-client-urls=https://127.0.0.1:{{.EtcdClient}}
    - --cert-file={{.PKI}}/etcd/server.crt
    - --client-cert-auth=true
    - --data-dir={{.Dir}}/etcd-data
    - --experimental-initial-corrupt-check=true
    - --experimental-watch-progress-notify-interval=5s
    - --initial-advertise-peer-urls=https://127.0.0.1:{{.EtcdPeer}}
    - --initial-cluster=host-a=https://127.0.0.1:{{.EtcdPeer}}
    - --key-file={{.PKI}}/etcd/server.key
    - --listen-client-urls=https://127.0.0.1:{{.EtcdClient}}
    - --listen-metrics-urls=http://127.0.0.1:{{.EtcdMetrics}}
    - --listen-peer-urls=https://127.0.0.1:{{.EtcdPeer}}
    - --name=host-a
    - --peer-cert-file={{.PKI}}/etcd/server.crt
    - --peer-client-cert-auth=true
    - --peer-key-file={{.PKI}}/etcd/server.key
    - --peer-trusted-ca-file={{.PKI}}/etcd/ca.crt
    - --snapshot-count=10000
    - --trusted-ca-file={{.PKI}}/etcd/ca.crt
    - --unsafe-no-fsync=true
    image: registry.k8s.io/etcd:3.5.21-0
    name: etcd
    ports: [{containerPort: {{.EtcdMetrics}}, name: probe-port, protocol: TCP}]
    readinessProbe:
      httpGet: {host: 127.0.0.1, path: /readyz, port: probe-port, scheme: HTTP}
      periodSeconds: 1
      timeoutSeconds: 15
    volumeMounts:
    - {mountPath: {{.Dir}}/etcd-data, name: etcd-data}
    - {mountPath: {{.PKI}}/etcd, name: etcd-certs}
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext: {seccompProfile: {type: RuntimeDefault}}
  volumes:
  - {hostPath: {path: {{.PKI}}/etcd, type: DirectoryOrCreate}, name: etcd-certs}
  - {hostPath: {path: {{.Dir}}/etcd-data, type: DirectoryOrCreate}, name: etcd-data}
status: {}
{{end}}
{{define "kube-apiserver"}}apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 127.0.0.1:{{.API}}
  labels: {component: kube-apiserver, tier: control-plane}
  name: kube-apiserver
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-apiserver
    - --advertise-address=127.0.0.1
    - --bind-address=127.0.0.1
    - --allow-privileged=true
    - --authorization-mode=Node,RBAC
    - --client-ca-file={{.PKI}}/ca.crt
    - --enable-admission-plugins=NodeRestriction
    - --enable-bootstrap-token-auth=true
    - --etcd-cafile={{.PKI}}/etcd/ca.crt
    - --etcd-certfile={{.PKI}}/apiserver-etcd-client.crt
    - --etcd-keyfile={{.PKI}}/apiserver-etcd-client.key
    - --etcd-servers=https://127.0.0.1:{{.EtcdClient}}
    - --secure-port={{.API}}
    - --service-account-issuer=https://kubernetes.default.svc.cluster.local
    - --service-account-key-file={{.PKI}}/sa.key
    - --service-account-signing-key-file={{.PKI}}/sa.key
    - --service-cluster-ip-range=10.96.0.0/12
    - --tls-cert-file={{.PKI}}/apiserver.crt
    - --tls-private-key-file={{.PKI}}/apiserver.key
    - --cert-dir={{.Dir}}/apiserver-certs
    image: registry.k8s.io/kube-apiserver:{{.Version}}
    name: kube-apiserver
    readinessProbe:
      httpGet: {host: 127.0.0.1, path: /readyz, port: {{.API}}, scheme: HTTPS}
      periodSeconds: 1
      timeoutSeconds: 15
    volumeMounts:
    - {mountPath: {{.PKI}}, name: k8s-certs, readOnly: true}
  hostNetwork: true
  priorityClassName: system-node-critical
  volumes:
  - {hostPath: {path: {{.PKI}}, type: DirectoryOrCreate}, name: k8s-certs}
status: {}
{{end}}
{{define "kube-controller-manager"}}apiVersion: v1
kind: Pod
metadata:
  labels: {component: kube-controller-manager, tier: control-plane}
  name: kube-controller-manager
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-controller-manager
    - --authentication-kubeconfig={{.Dir}}/controller-manager.conf
    - --authorization-kubeconfig={{.Dir}}/controller-manager.conf
    - --bind-address=127.0.0.1
    - --client-ca-file={{.PKI}}/ca.crt
    - --cluster-name=kubernetes
    - --cluster-signing-cert-file={{.PKI}}/ca.crt
    - --cluster-signing-key-file={{.PKI}}/ca.key
    - --controllers=*,bootstrapsigner,tokencleaner
    - --kubeconfig={{.Dir}}/controller-manager.conf
    - --leader-elect=true
    - --root-ca-file={{.PKI}}/ca.crt
    - --secure-port={{.KCM}}
    - --service-account-private-key-file={{.PKI}}/sa.key
    - --use-service-account-credentials=true
    {{- range .KCMExtra}}
    - {{.}}
    {{- end}}
    image: registry.k8s.io/kube-controller-manager:{{.Version}}
    name: kube-controller-manager
    startupProbe:
      httpGet: {host: 127.0.0.1, path: /healthz, port: {{.KCM}}, scheme: HTTPS}
      periodSeconds: 1
      timeoutSeconds: 15
  hostNetwork: true
  priorityClassName: system-node-critical
status: {}
{{end}}
`

type realEnv struct {
	Dir, PKI, Version                      string
	EtcdClient, EtcdPeer, EtcdMetrics, API int
	KCM, Healthz                           int
	KCMExtra                               []string
	tmpl                                   *template.Template
	ca                                     *certs.CA
	admin                                  *kubernetes.Clientset
}

func (e *realEnv) writeManifest(t *testing.T, name string) {
	t.Helper()
	var b strings.Builder
	if err := e.tmpl.ExecuteTemplate(&b, name, e); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.Dir, "manifests", name+".yaml")
	tmp := filepath.Join(e.Dir, "manifests", "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as kubeadm's atomic write
		t.Fatal(err)
	}
}

func writePair(t *testing.T, p *certs.Pair, base string) {
	t.Helper()
	if err := p.Write(base+".crt", base+".key"); err != nil {
		t.Fatal(err)
	}
}

func kubeconfig(server string, caPEM []byte, auth *clientcmdapi.AuthInfo) clientcmdapi.Config {
	return clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"kubernetes": {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"user": auth},
		Contexts:       map[string]*clientcmdapi.Context{"ctx": {Cluster: "kubernetes", AuthInfo: "user"}},
		CurrentContext: "ctx",
	}
}

// newRealEnv makes the certificates and kubeconfigs kubeadm's certs and
// kubeconfig phases would (with the repo's certs package), and the
// kubelet's config.
func newRealEnv(t *testing.T) *realEnv {
	t.Helper()
	dir := t.TempDir()
	e := &realEnv{Dir: dir, PKI: filepath.Join(dir, "pki"), Version: realVersion,
		EtcdClient: loopbacktest.Port(t), EtcdPeer: loopbacktest.Port(t), EtcdMetrics: loopbacktest.Port(t), API: loopbacktest.Port(t), KCM: loopbacktest.Port(t), Healthz: loopbacktest.Port(t)}
	e.tmpl = template.Must(template.New("m").Parse(manifestsTmpl))
	for _, d := range []string{filepath.Join(e.PKI, "etcd"), filepath.Join(dir, "manifests")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := certs.NewCA("kubernetes", certs.ECDSA, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.ca = ca
	if err := ca.Write(filepath.Join(e.PKI, "ca.crt"), filepath.Join(e.PKI, "ca.key")); err != nil {
		t.Fatal(err)
	}
	etcdCA, err := certs.NewCA("etcd-ca", certs.ECDSA, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := etcdCA.Write(filepath.Join(e.PKI, "etcd", "ca.crt"), filepath.Join(e.PKI, "etcd", "ca.key")); err != nil {
		t.Fatal(err)
	}
	srv, err := etcdCA.IssueEtcdServer(certs.Request{CommonName: "host-a", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, KeyType: certs.ECDSA})
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, srv, filepath.Join(e.PKI, "etcd", "server"))
	ec, err := etcdCA.IssueClient("kube-apiserver-etcd-client", nil, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, ec, filepath.Join(e.PKI, "apiserver-etcd-client"))
	api, err := ca.IssueAPIServer(certs.APIServerSANs{ReplicaIPs: []string{"127.0.0.1"}, ServiceCIDR: "10.96.0.0/12"}, certs.ECDSA, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, api, filepath.Join(e.PKI, "apiserver"))
	if _, err := certs.LoadOrCreateServiceAccountKey(filepath.Join(e.PKI, "sa.key"), certs.ECDSA); err != nil {
		t.Fatal(err)
	}
	server := "https://127.0.0.1:" + strconv.Itoa(e.API)
	kcm, err := ca.IssueClient("system:kube-controller-manager", nil, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(kubeconfig(server, ca.CertPEM, &clientcmdapi.AuthInfo{ClientCertificateData: kcm.CertPEM, ClientKeyData: kcm.KeyPEM}), filepath.Join(dir, "controller-manager.conf")); err != nil {
		t.Fatal(err)
	}
	admin, err := ca.IssueClient("kubernetes-admin", []string{"system:masters"}, certs.ECDSA)
	if err != nil {
		t.Fatal(err)
	}
	e.admin, err = kubernetes.NewForConfig(&rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM, CertData: admin.CertPEM, KeyData: admin.KeyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: %s\nhealthzPort: %d\npodLogsDir: %s\nnodeStatusUpdateFrequency: 2s\nnodeLeaseDurationSeconds: 8\nrotateCertificates: true\n",
		filepath.Join(dir, "manifests"), e.Healthz, filepath.Join(dir, "pod-logs"))
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// bootstrapToken sets up what kubeadm's bootstrap-token phase does for a
// joining node (cmd/kubeadm/app/phases/bootstraptoken/node/tlsbootstrap.go
// and token.go): a token Secret, the bootstrappers' right to create CSRs
// and the auto-approval of their node-client CSRs, and writes the
// bootstrap kubeconfig kubeadm join writes.
func (e *realEnv) bootstrapToken(ctx context.Context, t *testing.T) {
	t.Helper()
	const id, secret, group = "abcdef", "0123456789abcdef", "system:bootstrappers:kubeadm:default-node-token"
	_, err := e.admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{
			"token-id": id, "token-secret": secret,
			"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
			"auth-extra-groups": group, "expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bind := func(name, role string, subject rbacv1.Subject) {
		_, err := e.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{subject},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	bootstrappers := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}
	bind("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", bootstrappers)
	bind("kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrappers)
	bind("kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
		rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"})
	kc := kubeconfig("https://127.0.0.1:"+strconv.Itoa(e.API), e.ca.CertPEM, &clientcmdapi.AuthInfo{Token: id + "." + secret})
	if err := clientcmd.WriteToFile(kc, filepath.Join(e.Dir, "bootstrap-kubelet.conf")); err != nil {
		t.Fatal(err)
	}
}

// poll calls cond every 200 ms until it returns true or timeout passes.
func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	err := wait.Until(ctx, 200*time.Millisecond, what, func() (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("after %s: %v (last error: %v)", timeout, err, last)
	}
	t.Logf("%s after %s", what, time.Since(start).Round(100*time.Millisecond))
	return time.Since(start)
}

func containerPID(p *corev1.Pod) int {
	if cs := p.Status.ContainerStatuses; len(cs) == 1 && cs[0].State.Running != nil {
		n, _ := strconv.Atoi(strings.TrimPrefix(cs[0].ContainerID, "process://"))
		return n
	}
	return 0
}

// TestRealAPIServerKubelet runs the kubelet against the real
// kube-apiserver and kube-controller-manager it runs itself as static
// pods (with etcd), as on a kubeadm host: it bootstraps its client
// certificate through a CSR the real controller-manager approves and
// signs, registers its Node and keeps its Lease, publishes the mirror
// pods kubeadm waits on, restarts a killed process and replaces the pod
// of a changed manifest.
func TestRealAPIServerKubelet(t *testing.T) {
	bins := realBinDir(t)
	e := newRealEnv(t)
	for _, m := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		e.writeManifest(t, m)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o, err := ParseFlags([]string{
		"--bootstrap-kubeconfig=" + filepath.Join(e.Dir, "bootstrap-kubelet.conf"),
		"--kubeconfig=" + filepath.Join(e.Dir, "kubelet.conf"),
		"--config=" + filepath.Join(e.Dir, "config.yaml"),
		"--cert-dir=" + filepath.Join(e.Dir, "kubelet-pki"),
		// Not containerd's path: this test runs in the machine's own namespaces.
		"--container-runtime-endpoint=unix://" + filepath.Join(e.Dir, "cri.sock"),
		"--hostname-override=host-a", "--node-ip=127.0.0.1",
		"--hamaster-version=" + realVersion, "--hamaster-bin-dir=" + bins, "--hamaster-self=" + self,
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(e.Dir, "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ctx := t.Context()
	stop := runInBackground(t, o, slog.New(slog.NewJSONHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug})), 90*time.Second, "the kubelet did not stop its pods within 90 s")
	defer func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(e.Dir, "kubelet.log"))
			t.Logf("kubelet log:\n%s", b)
		}
	}()

	// kubeadm's WaitForKubelet.
	poll(t, 30*time.Second, "kubelet /healthz", func() (bool, error) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", e.Healthz))
		if err != nil {
			return false, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && string(b) == "ok", nil
	})
	// The apiserver, from the kubelet's static pod.
	poll(t, 90*time.Second, "kube-apiserver /readyz", func() (bool, error) {
		b, err := e.admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(b) == "ok", err
	})
	e.bootstrapToken(ctx, t)

	// kubeadm join's waitForTLSBootstrappedClient: kubelet.conf, pointing
	// at the pair the real controller-manager signed.
	kubeletConf := filepath.Join(e.Dir, "kubelet.conf")
	poll(t, 90*time.Second, "kubelet.conf from TLS bootstrap", func() (bool, error) {
		_, err := os.Stat(kubeletConf)
		return err == nil, err
	})
	kc, err := clientcmd.LoadFromFile(kubeletConf)
	if err != nil {
		t.Fatal(err)
	}
	pemPath := filepath.Join(e.Dir, "kubelet-pki", "kubelet-client-current.pem")
	if a := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]; a == nil || a.ClientCertificate != pemPath || a.ClientKey != pemPath {
		t.Fatalf("kubelet.conf's user = %+v, want client certificate and key %s", a, pemPath)
	}
	cert := readCert(t, pemPath)
	if cert.Subject.CommonName != "system:node:host-a" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:nodes" {
		t.Errorf("client certificate subject %v", cert.Subject)
	}
	if err := cert.CheckSignatureFrom(e.ca.Cert); err != nil {
		t.Errorf("client certificate not signed by the cluster CA: %v", err)
	}
	csrs, err := e.admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil || len(csrs.Items) != 1 || len(csrs.Items[0].Status.Conditions) == 0 || csrs.Items[0].Status.Conditions[0].Type != "Approved" ||
		csrs.Items[0].Spec.SignerName != "kubernetes.io/kube-apiserver-client-kubelet" {
		t.Fatalf("CSRs: %+v, %v", csrs, err)
	}

	// The Node, Ready, with its version; kubeadm's mark-control-plane needs it.
	poll(t, 60*time.Second, "Node host-a Ready", func() (bool, error) {
		n, err := e.admin.CoreV1().Nodes().Get(ctx, "host-a", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return n.Status.NodeInfo.KubeletVersion == realVersion && n.Labels["kubernetes.io/hostname"] == "host-a", nil
			}
		}
		return false, nil
	})
	var lease *coordinationv1.Lease
	poll(t, 20*time.Second, "the node's Lease", func() (bool, error) {
		lease, err = e.admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, "host-a", metav1.GetOptions{})
		return err == nil, err
	})
	poll(t, 20*time.Second, "the Lease renewed", func() (bool, error) {
		l, err := e.admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, "host-a", metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.After(lease.Spec.RenewTime.Time), err
	})

	// Mirror pods: kubeadm's WaitForPodsWithLabel (phase Running), the etcd
	// endpoints annotation, config.hash = the static pod's.
	hashOf := func(name string) string {
		b, err := os.ReadFile(filepath.Join(e.Dir, "manifests", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		sp, err := ParseStaticPod(b, filepath.Join(e.Dir, "manifests", name+".yaml"), "host-a")
		if err != nil {
			t.Fatal(err)
		}
		return sp.Hash
	}
	mirror := func(name string) (*corev1.Pod, error) {
		return e.admin.CoreV1().Pods("kube-system").Get(ctx, name+"-host-a", metav1.GetOptions{})
	}
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		poll(t, 60*time.Second, "mirror pod "+c+" Running", func() (bool, error) {
			pods, err := e.admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=" + c})
			if err != nil || len(pods.Items) != 1 {
				return false, err
			}
			p := pods.Items[0]
			return p.Status.Phase == corev1.PodRunning && p.Annotations[ConfigHashAnnotation] == hashOf(c), nil
		})
	}
	// Ready follows the readiness probes (etcd's /readyz on its metrics
	// port, the apiserver's /readyz over HTTPS).
	for _, c := range []string{"etcd", "kube-apiserver"} {
		poll(t, 30*time.Second, "mirror pod "+c+" Ready", func() (bool, error) {
			p, err := mirror(c)
			if err != nil {
				return false, err
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady {
					return cond.Status == corev1.ConditionTrue, nil
				}
			}
			return false, nil
		})
	}
	etcdPod, err := mirror("etcd")
	if err != nil {
		t.Fatal(err)
	}
	if got := etcdPod.Annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"]; got != fmt.Sprintf("https://127.0.0.1:%d", e.EtcdClient) {
		t.Errorf("etcd mirror pod's endpoint annotation = %q", got)
	}

	// A killed process is restarted.
	kcm, err := mirror("kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	pid := containerPID(kcm)
	if pid == 0 {
		t.Fatalf("no running kube-controller-manager in %+v", kcm.Status)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	poll(t, 60*time.Second, "kube-controller-manager restarted", func() (bool, error) {
		p, err := mirror("kube-controller-manager")
		if err != nil {
			return false, err
		}
		np := containerPID(p)
		return np != 0 && np != pid && p.Status.ContainerStatuses[0].RestartCount >= 1, nil
	})

	// A changed manifest: a new hash on the mirror pod (kubeadm upgrade's
	// WaitForStaticPodHashChange) and a new process.
	before, err := mirror("kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	oldHash, oldPID := before.Annotations[ConfigHashAnnotation], containerPID(before)
	e.KCMExtra = []string{"--v=2"}
	e.writeManifest(t, "kube-controller-manager")
	newHash := hashOf("kube-controller-manager")
	if newHash == oldHash {
		t.Fatal("the changed manifest has the same hash")
	}
	poll(t, 60*time.Second, "kube-controller-manager's new hash and process", func() (bool, error) {
		p, err := mirror("kube-controller-manager")
		if err != nil {
			return false, err
		}
		np := containerPID(p)
		return p.Annotations[ConfigHashAnnotation] == newHash && np != 0 && np != oldPID, nil
	})
	if syscall.Kill(oldPID, 0) == nil {
		t.Errorf("the old kube-controller-manager (pid %d) still runs", oldPID)
	}

	// A removed manifest: its pod stopped and its mirror pod deleted.
	if err := os.Remove(filepath.Join(e.Dir, "manifests", "kube-controller-manager.yaml")); err != nil {
		t.Fatal(err)
	}
	poll(t, 60*time.Second, "kube-controller-manager's mirror pod deleted", func() (bool, error) {
		_, err := mirror("kube-controller-manager")
		return apierrors.IsNotFound(err), nil
	})
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no certificate", path)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
}

// kubeadmScript runs in a private mount and network namespace
// (unshare -m -n), as a test-bed host would: /etc is an overlay whose
// writes land in $T/etc-up, /var/lib and /var/log are fresh tmpfs, so
// kubeadm and the kubelet use their default paths (/etc/kubernetes,
// /var/lib/kubelet, /var/lib/etcd) and ports without touching the
// machine's; /run is a fresh tmpfs too, for the runtime endpoint the
// kubelet serves at containerd's socket. The host is prepared as
// kubeadm's install page asks (net.ipv4.ip_forward=1, in its own network
// namespace; a kubelet on the PATH, $T/bin/kubelet reporting $FROM). The
// host's address is 10.99.0.2 on lo. It runs kubeadm init at $FROM, then
// kubeadm upgrade apply $TO, preflight run in both (the images pulled
// through the kubelet's runtime endpoint), and prints the Node's labels
// and taints and the control-plane pods after each. One check is ignored,
// by name: upgrade's CreateJob (cmd/kubeadm/app/phases/upgrade/health.go
// createJob) creates a Job whose pod (pause -v) the scheduler places on
// a control-plane node and waits 15 s for it to complete; the stand-in
// runs static pods only (docs/kubelet.md, "Left out"), so only a kubelet
// that runs scheduled pods passes it.
const kubeadmScript = `set -eu
mount -t overlay overlay -o lowerdir=/etc,upperdir=$T/etc-up,workdir=$T/etc-work /etc
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /var/log
mount -t tmpfs tmpfs /run
mkdir -p /etc/kubernetes /var/lib/kubelet /var/lib/etcd "$T/bin"
ip link set lo up
ip addr add 10.99.0.2/32 dev lo
echo 1 > /proc/sys/net/ipv4/ip_forward
printf '#!/bin/sh\nexec "%s" kubelet --hamaster-version=%s "$@"\n' "$SELF" "$FROM" > "$T/bin/kubelet"
chmod 755 "$T/bin/kubelet"
export PATH="$T/bin:$PATH"
"$SELF" kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf \
  --config=/var/lib/kubelet/config.yaml --hamaster-version=$FROM --hamaster-bin-dir="$BINS" --hamaster-self="$SELF" \
  --hostname-override=host-a 2> "$T/kubelet.log" &
KUBELET=$!
trap 'kill $KUBELET; wait $KUBELET' EXIT
pods() {
  "$BINS/$1/kubectl" get pods -n kube-system -l tier=control-plane \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.metadata.annotations.kubernetes\.io/config\.hash} {.spec.containers[0].image}{"\n"}{end}'
}
"$BINS/$FROM/kubeadm" init --kubernetes-version=$FROM --node-name=host-a \
  --apiserver-advertise-address=10.99.0.2 > "$T/kubeadm-init.log" 2>&1
export KUBECONFIG=/etc/kubernetes/admin.conf
"$BINS/$FROM/kubectl" get node host-a -o jsonpath='{.metadata.labels}{"\n"}{.spec.taints}{"\n"}'
pods $FROM
echo ---
"$BINS/$TO/kubeadm" upgrade apply $TO --yes --ignore-preflight-errors=CreateJob > "$T/kubeadm-upgrade.log" 2>&1
pods $TO
`

// TestRealAPIServerKubeadmInitUpgrade runs the real kubeadm init v1.33.13
// and then kubeadm upgrade apply v1.34.4 against the kubelet, on a host
// made of private namespaces. init waits for the kubelet's /healthz and
// for the control plane it runs from its manifests, and patches the Node
// the kubelet registered; upgrade replaces each manifest (etcd 3.5's
// flags → 3.6's) and waits for its mirror pod's config.hash to change
// (WaitForStaticPodHashChange) and for component=<name> to be Running.
func TestRealAPIServerKubeadmInitUpgrade(t *testing.T) {
	const from, to = realVersion, "v1.34.4"
	bins := realBinDir(t)
	for _, v := range []string{from, to} {
		for _, b := range []string{"kubeadm", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"} {
			if _, err := os.Stat(filepath.Join(bins, v, b)); err != nil {
				t.Fatalf("HAMASTER_REAL_APISERVER_DIR=%s: no %s %s (%v); run 'make kube-apiserver'", bins, b, v, err)
			}
		}
	}
	// Root is a precondition of the machine, not of the code: skipped
	// for a developer without it, never in CI (root there, as
	// metallabtest.Need insists). unshare is util-linux's, on every
	// Debian: missing, the machine is broken, and the test says so.
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root for its private mount and network namespaces (unshare -m -n); CI runs as root")
		}
		t.Skip("needs root for its private mount and network namespaces (unshare -m -n)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("needs unshare(1) (util-linux): %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{"etc-up", "etc-work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, "-m", "-n", "--propagation", "private", "/bin/sh", "-c", kubeadmScript)
	cmd.Env = append(os.Environ(), "T="+dir, "SELF="+self, "BINS="+bins, "FROM="+from, "TO="+to)
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("kubeadm init %s, upgrade apply %s: %s", from, to, time.Since(start).Round(time.Second))
	if err != nil {
		for _, f := range []string{"kubeadm-init.log", "kubeadm-upgrade.log", "kubelet.log"} {
			b, _ := os.ReadFile(filepath.Join(dir, f))
			t.Logf("%s:\n%s", f, b)
		}
		if ee, ok := err.(*exec.ExitError); ok {
			t.Logf("stderr: %s", ee.Stderr)
		}
		t.Fatalf("kubeadm against the kubelet: %v\noutput:\n%s", err, out)
	}
	before, after, ok := strings.Cut(strings.TrimSpace(string(out)), "\n---\n")
	lines := strings.Split(before, "\n")
	if !ok || len(lines) != 2+4 {
		t.Fatalf("output:\n%s\nwant the node's labels, taints and 4 control-plane pods, ---, 4 pods", out)
	}
	// mark-control-plane patched the Node the kubelet registered.
	if !strings.Contains(lines[0], `"node-role.kubernetes.io/control-plane":""`) || !strings.Contains(lines[1], "node-role.kubernetes.io/control-plane") {
		t.Errorf("node not marked as control plane: labels %s taints %s", lines[0], lines[1])
	}
	type pod struct{ phase, hash, image string }
	parse := func(lines []string) map[string]pod {
		m := map[string]pod{}
		for _, l := range lines {
			if f := strings.Fields(l); len(f) == 4 {
				m[f[0]] = pod{f[1], f[2], f[3]}
			}
		}
		return m
	}
	old, cur := parse(lines[2:]), parse(strings.Split(after, "\n"))
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		name := c + "-host-a"
		o, n := old[name], cur[name]
		if o.phase != "Running" || n.phase != "Running" || len(o.hash) != 32 || len(n.hash) != 32 || o.hash == n.hash {
			t.Errorf("%s: before %+v, after %+v; want Running both times with a new config.hash", name, o, n)
		}
		wantTag := ":" + to
		if c == "etcd" {
			wantTag = ":3.6."
		}
		if !strings.Contains(n.image, wantTag) {
			t.Errorf("%s: image %s after the upgrade, want %s", name, n.image, wantTag)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "etc-up", "kubernetes", "admin.conf")); err != nil {
		t.Errorf("kubeadm's files did not land in the host's own /etc: %v", err)
	}
	// Preflight ran, images pulled through the kubelet's runtime endpoint.
	for _, f := range []string{"kubeadm-init.log", "kubeadm-upgrade.log"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		// init: "[preflight] Running pre-flight checks", upgrade:
		// "[upgrade/preflight] Running preflight checks".
		if !strings.Contains(string(b), "preflight] Running pre") || !strings.Contains(string(b), "preflight] Pulling images") {
			t.Errorf("%s: preflight did not run, or pulled no image:\n%s", f, b)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "[WARNING") {
				t.Logf("%s: %s", f, strings.TrimSpace(l))
			}
		}
	}
}
