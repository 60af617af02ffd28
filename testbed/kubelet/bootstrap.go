package kubelet

import (
	"context"
	"crypto/sha512"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
)

// TLS bootstrap, as the real kubelet's pkg/kubelet/certificate/bootstrap/
// bootstrap.go LoadClientCert does it: while --kubeconfig holds no valid
// client certificate, use --bootstrap-kubeconfig (kubeadm join's
// bootstrap-kubelet.conf, a bootstrap token) to create a CSR for
// CN=system:node:<node>, O=system:nodes with signer
// kubernetes.io/kube-apiserver-client-kubelet, wait for the
// kube-controller-manager's csrapproving to approve it and csrsigning to
// sign it, keep the pair in <cert-dir>/kubelet-client-<time>.pem with the
// symlink kubelet-client-current.pem (client-go's certificate.FileStore,
// the store the real kubelet uses), and write --kubeconfig pointing at it
// (writeKubeconfigFromBootstrapping: clusters default-cluster, user
// default-auth, context default-context). kubeadm join waits for that file
// (waitForTLSBootstrappedClient).

const (
	clientPairPrefix = "kubelet-client"
	// bootstrapKeyFile is the private key kept while the CSR is pending,
	// so a restarted kubelet asks again with the same key and CSR name.
	bootstrapKeyFile = "kubelet-client.key.tmp"
)

// loadClientConfig returns a client config for kubeconfig if it loads and
// its client certificate, if it names one, exists and has not expired.
func loadClientConfig(kubeconfig string) (*restclient.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	certPEM := cfg.CertData
	if len(certPEM) == 0 && cfg.CertFile != "" {
		if certPEM, err = os.ReadFile(cfg.CertFile); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: client certificate: %w", kubeconfig, err)
		}
	}
	if len(certPEM) > 0 {
		certs, err := certutil.ParseCertsPEM(certPEM)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: client certificate: %w", kubeconfig, err)
		}
		if len(certs) == 0 || time.Now().After(certs[0].NotAfter) {
			return nil, fmt.Errorf("kubeconfig %s: client certificate expired", kubeconfig)
		}
	}
	return cfg, nil
}

// bootstrap returns the node's client config: --kubeconfig's if valid,
// else the one TLS bootstrap makes, and the sha256 of the kubeconfig file
// it was read from. It retries until ctx ends (the
// apiserver may not be up yet, the bootstrap kubeconfig not written yet).
func bootstrap(ctx context.Context, o Options, node string, log *slog.Logger) (*restclient.Config, [32]byte, error) {
	for attempt := 0; ; attempt++ {
		sum := fileSum(o.Kubeconfig)
		cfg, err := loadClientConfig(o.Kubeconfig)
		if err == nil {
			return cfg, sum, nil
		}
		if attempt == 0 {
			log.Info("no valid kubeconfig; TLS bootstrap", "kubeconfig", o.Kubeconfig, "bootstrap_kubeconfig", o.BootstrapKubeconfig, "reason", err)
		}
		if o.BootstrapKubeconfig != "" {
			if _, serr := os.Stat(o.BootstrapKubeconfig); serr == nil {
				err = tlsBootstrap(ctx, o, node, log)
				if err == nil {
					continue // load what it wrote
				}
				log.Warn("TLS bootstrap failed; retrying", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, [32]byte{}, fmt.Errorf("kubeconfig %s: %w (last: %v)", o.Kubeconfig, ctx.Err(), err)
		case <-time.After(2 * time.Second):
		}
	}
}

func tlsBootstrap(ctx context.Context, o Options, node string, log *slog.Logger) error {
	bcfg, err := clientcmd.BuildConfigFromFlags("", o.BootstrapKubeconfig)
	if err != nil {
		return fmt.Errorf("bootstrap kubeconfig %s: %w", o.BootstrapKubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(bcfg)
	if err != nil {
		return fmt.Errorf("bootstrap client: %w", err)
	}
	if err := os.MkdirAll(o.CertDir, 0o755); err != nil {
		return fmt.Errorf("cert dir: %w", err)
	}
	keyPath := filepath.Join(o.CertDir, bootstrapKeyFile)
	keyPEM, _, err := keyutil.LoadOrGenerateKeyFile(keyPath)
	if err != nil {
		return fmt.Errorf("bootstrap key: %w", err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return fmt.Errorf("bootstrap key: %w", err)
	}
	subject := &pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}
	csrPEM, err := certutil.MakeCSR(key, subject, nil, nil)
	if err != nil {
		return fmt.Errorf("CSR: %w", err)
	}
	// An ECDSA key's kubelet client CSR asks for these two (the real
	// kubelet's requestNodeCertificate adds key encipherment for RSA only).
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	name := csrName(keyPEM, subject)
	reqName, reqUID, err := csr.RequestCertificateWithContext(ctx, client, csrPEM, name, certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return fmt.Errorf("create CSR %s: %w", name, err)
	}
	log.Info("CSR created; waiting for it to be approved and signed", "csr", reqName)
	// The real kubelet waits up to an hour; a bound keeps a rejected or
	// forgotten CSR from blocking forever (the caller retries).
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	certPEM, err := csr.WaitForCertificate(wctx, client, reqName, reqUID)
	if err != nil {
		return fmt.Errorf("CSR %s: %w", reqName, err)
	}
	store, err := certificate.NewFileStore(clientPairPrefix, o.CertDir, o.CertDir, "", "")
	if err != nil {
		return fmt.Errorf("certificate store: %w", err)
	}
	if _, err := store.Update(certPEM, keyPEM); err != nil {
		return fmt.Errorf("store certificate: %w", err)
	}
	if err := writeBootstrappedKubeconfig(bcfg, o.Kubeconfig, store.CurrentPath()); err != nil {
		return err
	}
	if err := os.Remove(keyPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("bootstrap key: %w", err)
	}
	log.Info("TLS bootstrap done", "csr", reqName, "kubeconfig", o.Kubeconfig, "cert", store.CurrentPath())
	return nil
}

// csrName is a name that is the same for the same key and subject, so a
// restart finds its pending CSR (the real kubelet's digestedName).
func csrName(keyPEM []byte, subject *pkix.Name) string {
	h := sha512.New512_256()
	h.Write(keyPEM)
	h.Write([]byte(subject.CommonName))
	for _, o := range subject.Organization {
		h.Write([]byte(o))
	}
	return "node-csr-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func writeBootstrappedKubeconfig(bcfg *restclient.Config, path, pemPath string) error {
	cluster := &clientcmdapi.Cluster{Server: bcfg.Host, InsecureSkipTLSVerify: bcfg.Insecure, CertificateAuthority: bcfg.CAFile}
	if bcfg.CAFile == "" {
		cluster.CertificateAuthorityData = bcfg.CAData
	}
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"default-cluster": cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"default-auth": {ClientCertificate: pemPath, ClientKey: pemPath}},
		Contexts:       map[string]*clientcmdapi.Context{"default-context": {Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default"}},
		CurrentContext: "default-context",
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if err := clientcmd.WriteToFile(kc, path); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return nil
}
