package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/kubeenv"
)

// KubeUpAPIServerPort is kube-apiserver's port on a kube-up master
// (configure-kubeapiserver.sh start-kube-apiserver: --secure-port=443).
const KubeUpAPIServerPort = 443

// defaultQuotaBackendBytes is prepare-etcd-manifest's
// --quota-backend-bytes=${ETCD_QUOTA_BACKEND_BYTES:-4294967296}.
const defaultQuotaBackendBytes = 4294967296

// KubeUpOptions are what a kube-up GCE master boots from: its two
// metadata items and the VM's own facts.
type KubeUpOptions struct {
	// KubeEnv and MasterCerts are the texts of the "kube-env" and
	// "kube-master-certs" metadata items.
	KubeEnv, MasterCerts string
	// Hostname is the VM's `hostname -s` (the instance name);
	// ETCD_HOSTNAME in kube-env wins, as in prepare-etcd-manifest.
	Hostname string
	// Disk is the master PD's mount point (/mnt/disks/master-pd): etcd
	// data goes to Disk/var/etcd/data[-events], certificates to
	// Disk/srv/kubernetes (mount-master-pd links /var/etcd and
	// /etc/srv/kubernetes there).
	Disk string
	// StatusFile and PIDFile are as in Config.
	StatusFile, PIDFile string
	// ResolveTimeout bounds the lookup of the hostname's address
	// (prepare-etcd-manifest retries gethostbyname for 300 s).
	ResolveTimeout time.Duration
	// EtcdUnsafeNoFsync disables etcd's fsync (tests only).
	EtcdUnsafeNoFsync bool
	// Downloads maps a URL (kube-env SERVER_BINARY_TAR_URL,
	// KUBE_MANIFESTS_TAR_URL) to the local file the VM downloads from it;
	// a URL not listed cannot be downloaded (see installRelease).
	Downloads map[string]string
}

// kubeUpMaster is a kube-up master's configuration after
// configure-helper.sh has written its files.
type kubeUpMaster struct {
	host    string   // hostname (etcd member etcd-<host>)
	hostIP  string   // the hostname's address: etcd peers listen there
	hosts   []string // INITIAL_ETCD_CLUSTER
	state   string   // INITIAL_ETCD_CLUSTER_STATE
	listen  string   // ETCD_LISTEN_CLIENT_IP
	quota   int64
	noFsync bool

	dataDir string // Disk/var/etcd

	// Files written by create-master-etcd-auth (peer TLS of both clusters).
	etcdCA, peerCert, peerKey string
	// Files written by create-master-etcd-apiserver-auth (main etcd's
	// client mTLS); clientTLS is false when kube-master-certs has none
	// of the six ETCD_APISERVER_* keys (then main etcd serves http).
	clientTLS                     bool
	apiCA, serverCert, serverKey  string
	clientCertFile, clientKeyFile string
	apiserverCert, apiserverKey   string
	// clientCA is CA_CERT's file, the apiserver's --client-ca-file
	// (configure-kubeapiserver.sh); "" when kube-env has no CA_CERT.
	clientCA    string
	kubeVersion string
	extraArgs   string // APISERVER_TEST_ARGS
}

// RunKubeUpMaster boots a master as cluster/gce/gci/configure-helper.sh
// does from kube-up's metadata, then runs it until ctx is done: both etcd
// members (main and events, start-etcd-servers) and the apiserver
// stand-in on :443 storing in main etcd through https://127.0.0.1:2379.
// A kube-env a real master could not boot from is an error of kind
// errkind.InvalidArgument naming the key.
func RunKubeUpMaster(ctx context.Context, o KubeUpOptions, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// configure.sh installs the release before configure-helper.sh
	// starts anything; a kube-env that does not parse is reported by
	// prepareKubeUp.
	version := ""
	if env, err := kubeenv.Parse(o.KubeEnv); err == nil {
		if version, err = installRelease(ctx, env, o.Downloads, logger); err != nil {
			return err
		}
	}
	m, err := prepareKubeUp(ctx, o)
	if err != nil {
		return err
	}
	if version != "" {
		m.kubeVersion = version // KUBE_VERSION only without a server tarball
	}
	logger.Info("kube-up master configured", "hostname", m.host, "host_ip", m.hostIP,
		"initial_cluster", kubeenv.InitialClusterFlag(kubeenv.EtcdMain, m.hosts), "state", m.state)
	cfg := Config{
		Name:          m.host,
		Address:       "", // --secure-port=443 binds all addresses
		APIServerPort: KubeUpAPIServerPort,
		APIServerCert: m.apiserverCert,
		APIServerKey:  m.apiserverKey,
		ClientCAFile:  m.clientCA,
		KubeVersion:   m.kubeVersion,
		// start-kube-apiserver appends ${APISERVER_TEST_ARGS} to the
		// flags; the stand-in refuses what kube-apiserver would.
		APIServerExtraArgs: m.extraArgs,
		DataDir:            o.Disk,
		PIDFile:            o.PIDFile,
		StatusFile:         o.StatusFile,
	}
	clientTLS, err := m.apiserverEtcdTLS()
	if err != nil {
		return err
	}
	return run(ctx, cfg, logger, func(n *node) (*etcdMember, *etcdMember) {
		newMember := func(c kubeenv.EtcdCluster) *etcdMember {
			return &etcdMember{
				name:        kubeenv.MemberName(m.host) + c.Suffix,
				embedConfig: func() (*embed.Config, error) { return m.embedConfig(c) },
				log:         n.log.With("component", "etcd"+c.Suffix),
				onChange:    n.poke,
				state:       nodeapi.EtcdStarting,
			}
		}
		main, events := newMember(kubeenv.EtcdMain), newMember(kubeenv.EtcdEvents)
		// configure-kubeapiserver.sh configure-etcd-params: the apiserver
		// talks to its local main etcd only, with the etcd client
		// certificate when main etcd has client mTLS.
		main.dial = func(ctx context.Context) (*clientv3.Client, error) {
			return clientv3.New(clientv3.Config{
				Endpoints:   []string{m.clientURL(kubeenv.EtcdMain, "127.0.0.1")},
				TLS:         clientTLS,
				DialTimeout: 5 * time.Second,
				Context:     ctx,
				Logger:      zap.NewNop(),
			})
		}
		return main, events
	})
}

// prepareKubeUp reads the metadata, checks it as a real master's boot
// would, writes the certificate files and resolves the hostname.
func prepareKubeUp(ctx context.Context, o KubeUpOptions) (*kubeUpMaster, error) {
	bad := func(format string, args ...any) error {
		return errkind.Errorf(errkind.InvalidArgument, format, args...)
	}
	md, err := kubeenv.ParseMaster(o.KubeEnv, o.MasterCerts)
	if err != nil {
		return nil, bad("%w", err)
	}
	env, crt := md.Env, md.Certs
	if o.Disk == "" {
		return nil, bad("no disk directory: want the master PD's mount point")
	}
	if v := env["ETCD_SERVERS"]; v != "" {
		// configure-helper.sh main: start-etcd-servers is skipped.
		return nil, bad("kube-env ETCD_SERVERS=%q: an external etcd is not supported (the master would run no etcd of its own)", v)
	}
	m := &kubeUpMaster{host: env["ETCD_HOSTNAME"], noFsync: o.EtcdUnsafeNoFsync, kubeVersion: env[kubeenv.KubeVersion], extraArgs: env[kubeenv.APIServerTestArgs]}
	if m.host == "" {
		m.host = o.Hostname
	}
	if m.host == "" {
		return nil, bad("no hostname: kube-env has no ETCD_HOSTNAME and --hostname is empty")
	}
	if _, err := kubeenv.Hosts(map[string]string{kubeenv.InitialEtcdCluster: m.host}, ""); err != nil {
		return nil, bad("hostname %q (ETCD_HOSTNAME or --hostname) is not a lower-case DNS label", m.host)
	}

	// prepare-etcd-manifest: --initial-cluster from INITIAL_ETCD_CLUSTER
	// (default: this host alone), which must name this host or etcd
	// refuses to start ("couldn't find local name ... in the initial
	// cluster configuration").
	if m.hosts, err = kubeenv.Hosts(env, m.host); err != nil {
		return nil, bad("kube-env %w", err)
	}
	found := false
	for _, h := range m.hosts {
		found = found || h == m.host
	}
	if !found {
		return nil, bad("kube-env %s=%q does not list this master's hostname %q: etcd member %s is not in --initial-cluster",
			kubeenv.InitialEtcdCluster, env[kubeenv.InitialEtcdCluster], m.host, kubeenv.MemberName(m.host))
	}
	switch m.state = env[kubeenv.InitialEtcdClusterState]; m.state {
	case "":
		m.state = kubeenv.StateNew
	case kubeenv.StateNew, kubeenv.StateExisting:
	default:
		return nil, bad("kube-env %s=%q: want %q or %q", kubeenv.InitialEtcdClusterState, m.state, kubeenv.StateNew, kubeenv.StateExisting)
	}
	m.listen = env["ETCD_LISTEN_CLIENT_IP"]
	if m.listen == "" {
		m.listen = "127.0.0.1"
	} else if net.ParseIP(m.listen) == nil {
		return nil, bad("kube-env ETCD_LISTEN_CLIENT_IP=%q is not an IP", m.listen)
	}
	m.quota = defaultQuotaBackendBytes
	if v := env["ETCD_QUOTA_BACKEND_BYTES"]; v != "" {
		if m.quota, err = strconv.ParseInt(v, 10, 64); err != nil || m.quota < 0 {
			return nil, bad("kube-env ETCD_QUOTA_BACKEND_BYTES=%q: want a number of bytes", v)
		}
	}

	// Peer TLS of both clusters. kube-up always creates the peer
	// material (create-etcd-certs) and hamaster's peer URLs are https.
	if missing := missingKeys(env, kubeenv.EtcdCACert, kubeenv.EtcdPeerCert, kubeenv.EtcdPeerKey); len(missing) > 0 {
		return nil, bad("kube-env has no %s: etcd peers need ETCD_CA_CERT, ETCD_PEER_CERT and ETCD_PEER_KEY (cluster/gce/util.sh create-etcd-certs)", strings.Join(missing, ", "))
	}
	// Main etcd's client mTLS: all six ETCD_APISERVER_* or none
	// (configure-kubeapiserver.sh configure-etcd-params exits 1 on some).
	apiKeys := []string{kubeenv.EtcdAPIServerCACert, kubeenv.EtcdAPIServerCAKey, kubeenv.EtcdAPIServerServerCert,
		kubeenv.EtcdAPIServerServerKey, kubeenv.EtcdAPIServerClientCert, kubeenv.EtcdAPIServerClientKey}
	missing := missingKeys(crt, apiKeys...)
	if len(missing) > 0 && len(missing) < len(apiKeys) {
		return nil, bad("kube-master-certs has no %s while other ETCD_APISERVER_* keys are set: set all six or none", strings.Join(missing, ", "))
	}
	m.clientTLS = len(missing) == 0
	if missing := missingKeys(env, kubeenv.MasterCert, kubeenv.MasterKey); len(missing) > 0 {
		return nil, bad("kube-env has no %s: the apiserver serves HTTPS with them (create-master-pki)", strings.Join(missing, ", "))
	}

	if err := m.writeFiles(o.Disk, env, crt); err != nil {
		return nil, err
	}
	if m.hostIP, err = resolveHost(ctx, m.host, o.ResolveTimeout); err != nil {
		return nil, err
	}
	return m, nil
}

func missingKeys(kv map[string]string, keys ...string) []string {
	var out []string
	for _, k := range keys {
		if strings.TrimSpace(kv[k]) == "" {
			out = append(out, k)
		}
	}
	return out
}

// writeFiles writes the certificates and keys where configure-helper.sh
// does, under disk/srv/kubernetes (/etc/srv/kubernetes links there), and
// creates disk/var/etcd (mount-master-pd: mode 700).
func (m *kubeUpMaster) writeFiles(disk string, env, crt map[string]string) error {
	srv := filepath.Join(disk, "srv", "kubernetes")
	pki := filepath.Join(srv, "pki")
	m.dataDir = filepath.Join(disk, "var", "etcd")
	for _, d := range []string{pki, m.dataDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("kube-up master: %w", err)
		}
	}
	type file struct {
		item, key string
		kv        map[string]string
		path      *string
		isKey     bool
	}
	m.etcdCA, m.peerCert, m.peerKey = filepath.Join(srv, "etcd-ca.crt"), filepath.Join(srv, "etcd-peer.crt"), filepath.Join(srv, "etcd-peer.key")
	m.apiserverCert, m.apiserverKey = filepath.Join(pki, "apiserver.crt"), filepath.Join(pki, "apiserver.key")
	caCert := filepath.Join(pki, "ca.crt")
	files := []file{
		// create-master-etcd-auth: certificates `base64 --decode | gunzip`,
		// the key `base64 --decode`.
		{kubeenv.KeyEnv, kubeenv.EtcdCACert, env, &m.etcdCA, false},
		{kubeenv.KeyEnv, kubeenv.EtcdPeerCert, env, &m.peerCert, false},
		{kubeenv.KeyEnv, kubeenv.EtcdPeerKey, env, &m.peerKey, true},
		// create-master-pki: CA_CERT, MASTER_CERT and MASTER_KEY base64.
		{kubeenv.KeyEnv, kubeenv.MasterCert, env, &m.apiserverCert, false},
		{kubeenv.KeyEnv, kubeenv.MasterKey, env, &m.apiserverKey, true},
	}
	if env[kubeenv.CACert] != "" {
		files = append(files, file{kubeenv.KeyEnv, kubeenv.CACert, env, &caCert, false})
		m.clientCA = caCert
	}
	if m.clientTLS {
		// create-master-etcd-apiserver-auth, into /etc/srv/kubernetes/pki.
		apiCAKey := filepath.Join(pki, "etcd-apiserver-ca.key")
		m.apiCA = filepath.Join(pki, "etcd-apiserver-ca.crt")
		m.serverCert, m.serverKey = filepath.Join(pki, "etcd-apiserver-server.crt"), filepath.Join(pki, "etcd-apiserver-server.key")
		m.clientCertFile, m.clientKeyFile = filepath.Join(pki, "etcd-apiserver-client.crt"), filepath.Join(pki, "etcd-apiserver-client.key")
		files = append(files,
			file{kubeenv.KeyCerts, kubeenv.EtcdAPIServerCAKey, crt, &apiCAKey, true},
			file{kubeenv.KeyCerts, kubeenv.EtcdAPIServerCACert, crt, &m.apiCA, false},
			file{kubeenv.KeyCerts, kubeenv.EtcdAPIServerServerKey, crt, &m.serverKey, true},
			file{kubeenv.KeyCerts, kubeenv.EtcdAPIServerServerCert, crt, &m.serverCert, false},
			file{kubeenv.KeyCerts, kubeenv.EtcdAPIServerClientKey, crt, &m.clientKeyFile, true},
			file{kubeenv.KeyCerts, kubeenv.EtcdAPIServerClientCert, crt, &m.clientCertFile, false},
		)
	}
	for _, f := range files {
		// Certificates are gzip+base64 for etcd and plain base64 for the
		// rest; DecodeGzipBase64 takes both.
		b, err := kubeenv.DecodeGzipBase64(f.key, f.kv[f.key])
		if err != nil {
			return errkind.Errorf(errkind.InvalidArgument, "%s: %w", f.item, err)
		}
		mode := os.FileMode(0o644)
		if f.isKey {
			mode = 0o600
		}
		if err := fsutil.ReplaceFile(*f.path, b, mode); err != nil {
			return fmt.Errorf("kube-up master: write %s: %w", f.key, err)
		}
	}
	// Pairs that do not load would make etcd or the apiserver crash-loop;
	// say which keys at once.
	pairs := [][4]string{
		{kubeenv.EtcdPeerCert, kubeenv.EtcdPeerKey, m.peerCert, m.peerKey},
		{kubeenv.MasterCert, kubeenv.MasterKey, m.apiserverCert, m.apiserverKey},
	}
	if m.clientTLS {
		pairs = append(pairs,
			[4]string{kubeenv.EtcdAPIServerServerCert, kubeenv.EtcdAPIServerServerKey, m.serverCert, m.serverKey},
			[4]string{kubeenv.EtcdAPIServerClientCert, kubeenv.EtcdAPIServerClientKey, m.clientCertFile, m.clientKeyFile})
	}
	for _, p := range pairs {
		if _, err := tls.LoadX509KeyPair(p[2], p[3]); err != nil {
			return errkind.Errorf(errkind.InvalidArgument, "%s/%s: %w", p[0], p[1], err)
		}
	}
	for _, ca := range [][2]string{{kubeenv.EtcdCACert, m.etcdCA}, {kubeenv.EtcdAPIServerCACert, m.apiCA}} {
		if ca[1] == "" {
			continue
		}
		if _, err := certs.LoadPool(ca[1]); err != nil {
			return errkind.Errorf(errkind.InvalidArgument, "%s: %w", ca[0], err)
		}
	}
	return nil
}

// resolveHost is prepare-etcd-manifest's host_ip: python's
// socket.gethostbyname(hostname), retried for a while (inside a VM the
// hosts file or the metadata DNS may lag the boot). It returns an IPv4
// address, as gethostbyname does.
func resolveHost(ctx context.Context, host string, timeout time.Duration) (string, error) {
	if timeout <= 0 {
		timeout = 300 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last error
	for {
		ips, err := net.DefaultResolver.LookupIP(ctx, "ip4", host)
		if err == nil && len(ips) > 0 {
			return ips[0].String(), nil
		}
		if err == nil {
			err = fmt.Errorf("no IPv4 address")
		}
		last = err
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("resolve this master's hostname %s (etcd peers listen on its address): %w", host, last)
		case <-tick.C:
		}
	}
}

// clientURL is cluster c's client URL on ip: https on main etcd when it
// has client mTLS, http otherwise (prepare-etcd-manifest:
// etcd_apiserver_protocol applies to the main cluster only).
func (m *kubeUpMaster) clientURL(c kubeenv.EtcdCluster, ip string) string {
	scheme := "http"
	if c.Suffix == "" && m.clientTLS {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(c.ClientPort))
}

// embedConfig is etcd.manifest's command line for cluster c, after
// prepare-etcd-manifest's substitutions:
//
//	etcd --name etcd-<host>
//	  --listen-peer-urls https://<host_ip>:<peer port>
//	  --initial-advertise-peer-urls https://<host>:<peer port>
//	  --advertise-client-urls <proto>://127.0.0.1:<client port>
//	  --listen-client-urls <proto>://<listen_client_ip>:<client port>
//	  --quota-backend-bytes=... --data-dir /var/etcd/data<suffix>
//	  --initial-cluster-state <state> --initial-cluster <etcd_cluster>
//	  <peer TLS, -peer-client-cert-auth> [main: --client-cert-auth TLS]
//
// The member name is etcd-<host> on both clusters, as in the manifest.
func (m *kubeUpMaster) embedConfig(c kubeenv.EtcdCluster) (*embed.Config, error) {
	listenPeer, err := url.Parse("https://" + net.JoinHostPort(m.hostIP, strconv.Itoa(c.PeerPort)))
	if err != nil {
		return nil, fmt.Errorf("etcd%s listen peer URL: %w", c.Suffix, err)
	}
	advPeer, err := url.Parse(kubeenv.PeerURL(c, m.host))
	if err != nil {
		return nil, fmt.Errorf("etcd%s peer URL: %w", c.Suffix, err)
	}
	listenClient, err := url.Parse(m.clientURL(c, m.listen))
	if err != nil {
		return nil, fmt.Errorf("etcd%s client URL: %w", c.Suffix, err)
	}
	advClient, err := url.Parse(m.clientURL(c, "127.0.0.1"))
	if err != nil {
		return nil, fmt.Errorf("etcd%s client URL: %w", c.Suffix, err)
	}
	ec := embed.NewConfig()
	ec.Name = kubeenv.MemberName(m.host)
	ec.Dir = filepath.Join(m.dataDir, "data"+c.Suffix)
	ec.ListenPeerUrls = []url.URL{*listenPeer}
	ec.AdvertisePeerUrls = []url.URL{*advPeer}
	ec.ListenClientUrls = []url.URL{*listenClient}
	ec.AdvertiseClientUrls = []url.URL{*advClient}
	ec.InitialCluster = kubeenv.InitialClusterFlag(c, m.hosts)
	ec.ClusterState = m.state
	ec.QuotaBackendBytes = m.quota
	ec.UnsafeNoFsync = m.noFsync
	ec.Logger = "zap"
	ec.LogLevel = "warn"
	ec.LogOutputs = []string{embed.StdErrLogOutput}
	ec.PeerTLSInfo.TrustedCAFile = m.etcdCA
	ec.PeerTLSInfo.CertFile = m.peerCert
	ec.PeerTLSInfo.KeyFile = m.peerKey
	ec.PeerTLSInfo.ClientCertAuth = true
	if c.Suffix == "" && m.clientTLS {
		ec.ClientTLSInfo.ClientCertAuth = true
		ec.ClientTLSInfo.TrustedCAFile = m.apiCA
		ec.ClientTLSInfo.CertFile = m.serverCert
		ec.ClientTLSInfo.KeyFile = m.serverKey
	}
	return ec, nil
}

// apiserverEtcdTLS is kube-apiserver's --etcd-cafile, --etcd-certfile and
// --etcd-keyfile as a client TLS configuration; nil without client mTLS.
func (m *kubeUpMaster) apiserverEtcdTLS() (*tls.Config, error) {
	if !m.clientTLS {
		return nil, nil
	}
	pool, err := certs.LoadPool(m.apiCA)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kubeenv.EtcdAPIServerCACert, err)
	}
	cert, err := tls.LoadX509KeyPair(m.clientCertFile, m.clientKeyFile)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", kubeenv.EtcdAPIServerClientCert, kubeenv.EtcdAPIServerClientKey, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
