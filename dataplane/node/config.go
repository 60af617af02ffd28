package node

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/kubeenv"
)

// Config is a replica's configuration, as read from its env file.
type Config struct {
	Name    string // NODE_NAME
	Address string // NODE_ADDRESS

	InitialCluster      string // INITIAL_ETCD_CLUSTER
	InitialClusterState string // ETCD_INITIAL_CLUSTER_STATE
	EtcdClientPort      int    // ETCD_CLIENT_PORT
	EtcdPeerPort        int    // ETCD_PEER_PORT

	EtcdCACert     string // ETCD_CA_CERT
	EtcdPeerCert   string // ETCD_PEER_CERT
	EtcdPeerKey    string // ETCD_PEER_KEY
	EtcdServerCert string // ETCD_SERVER_CERT
	EtcdServerKey  string // ETCD_SERVER_KEY

	EtcdHeartbeat     time.Duration // ETCD_HEARTBEAT_MS
	EtcdElection      time.Duration // ETCD_ELECTION_MS
	EtcdUnsafeNoFsync bool          // ETCD_UNSAFE_NO_FSYNC

	APIServerPort int    // APISERVER_PORT
	APIServerCert string // APISERVER_CERT
	APIServerKey  string // APISERVER_KEY
	// ClientCAFile verifies the apiserver's clients (kube-up's
	// --client-ca-file, CA_CERT); "" uses EtcdCACert, the local
	// provider's cluster CA.
	ClientCAFile       string
	APIServerExtraArgs string // APISERVER_EXTRA_ARGS
	KubeVersion        string // KUBE_VERSION

	ControlPlane          string // CONTROL_PLANE: nodeapi.ControlPlaneStandin ("" too) or ControlPlaneReal
	KubeAPIServerDir      string // KUBE_APISERVER_DIR
	ServiceAccountKeyFile string // SERVICE_ACCOUNT_KEY_FILE
	ServiceClusterIPRange string // SERVICE_CLUSTER_IP_RANGE

	DataDir      string // DATA_DIR
	StaticIPFile string // STATIC_IP_FILE
	PIDFile      string // PID_FILE
	StatusFile   string // STATUS_FILE
}

// EtcdTLS reports whether etcd peer and client traffic is mTLS (all five
// ETCD_* certificate keys set) rather than plaintext http.
func (c Config) EtcdTLS() bool { return c.EtcdCACert != "" }

// EtcdScheme is "https" when EtcdTLS, else "http".
func (c Config) EtcdScheme() string {
	if c.EtcdTLS() {
		return "https"
	}
	return "http"
}

// EtcdClientURL is the URL etcd serves clients on.
func (c Config) EtcdClientURL() string {
	return c.EtcdScheme() + "://" + net.JoinHostPort(c.Address, strconv.Itoa(c.EtcdClientPort))
}

// EtcdPeerURL is the URL etcd serves peers on, as it must appear in
// INITIAL_ETCD_CLUSTER.
func (c Config) EtcdPeerURL() string {
	return c.EtcdScheme() + "://" + net.JoinHostPort(c.Address, strconv.Itoa(c.EtcdPeerPort))
}

// APIServerAddress is NODE_ADDRESS:APISERVER_PORT.
func (c Config) APIServerAddress() string {
	return net.JoinHostPort(c.Address, strconv.Itoa(c.APIServerPort))
}

// LoadEnvFile reads and validates an env file. Errors are of kind
// errkind.InvalidArgument and name the offending key.
func LoadEnvFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, errkind.Errorf(errkind.InvalidArgument, "env file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return Config{}, errkind.Errorf(errkind.InvalidArgument, "env file: %w", err)
	}
	env, err := kubeenv.Parse(string(b))
	if err != nil {
		return Config{}, errkind.Errorf(errkind.InvalidArgument, "env file %s: %w", path, err)
	}
	cfg, err := ConfigFromEnv(env)
	if err != nil {
		return Config{}, fmt.Errorf("env file %s: %w", path, err)
	}
	return cfg, nil
}

// Env renders c as env-file keys; ConfigFromEnv(c.Env()) gives c back.
// Empty values are left out.
func (c Config) Env() map[string]string {
	env := map[string]string{
		nodeapi.KeyNodeName:                c.Name,
		nodeapi.KeyNodeAddress:             c.Address,
		nodeapi.KeyInitialEtcdCluster:      c.InitialCluster,
		nodeapi.KeyEtcdInitialClusterState: c.InitialClusterState,
		nodeapi.KeyEtcdCACert:              c.EtcdCACert,
		nodeapi.KeyEtcdPeerCert:            c.EtcdPeerCert,
		nodeapi.KeyEtcdPeerKey:             c.EtcdPeerKey,
		nodeapi.KeyEtcdServerCert:          c.EtcdServerCert,
		nodeapi.KeyEtcdServerKey:           c.EtcdServerKey,
		nodeapi.KeyAPIServerCert:           c.APIServerCert,
		nodeapi.KeyAPIServerKey:            c.APIServerKey,
		nodeapi.KeyAPIServerExtraArgs:      c.APIServerExtraArgs,
		nodeapi.KeyKubeVersion:             c.KubeVersion,
		nodeapi.KeyDataDir:                 c.DataDir,
		nodeapi.KeyStaticIPFile:            c.StaticIPFile,
		nodeapi.KeyPIDFile:                 c.PIDFile,
		nodeapi.KeyStatusFile:              c.StatusFile,
		nodeapi.KeyControlPlane:            c.ControlPlane,
		nodeapi.KeyKubeAPIServerDir:        c.KubeAPIServerDir,
		nodeapi.KeyServiceAccountKeyFile:   c.ServiceAccountKeyFile,
		nodeapi.KeyServiceClusterIPRange:   c.ServiceClusterIPRange,
	}
	ints := map[string]int{
		nodeapi.KeyEtcdClientPort:  c.EtcdClientPort,
		nodeapi.KeyEtcdPeerPort:    c.EtcdPeerPort,
		nodeapi.KeyAPIServerPort:   c.APIServerPort,
		nodeapi.KeyEtcdHeartbeatMS: int(c.EtcdHeartbeat / time.Millisecond),
		nodeapi.KeyEtcdElectionMS:  int(c.EtcdElection / time.Millisecond),
	}
	for k, v := range ints {
		if v != 0 {
			env[k] = strconv.Itoa(v)
		}
	}
	if c.EtcdUnsafeNoFsync {
		env[nodeapi.KeyEtcdUnsafeNoFsync] = "true"
	}
	for k, v := range env {
		if v == "" {
			delete(env, k)
		}
	}
	return env
}

// WriteEnvFile writes c as an env file (kube-env YAML, see package kubeenv)
// atomically: a temporary file in the same directory renamed over path.
func WriteEnvFile(path string, c Config) error {
	if err := fsutil.ReplaceFile(path, []byte(kubeenv.Render(c.Env())), 0o600); err != nil {
		return fmt.Errorf("write env file: %w", err)
	}
	return nil
}

// ConfigFromEnv builds and validates a Config from env-file keys. Unknown
// keys are ignored (a real kube-env carries many). Errors are of kind
// errkind.InvalidArgument and name the offending key.
func ConfigFromEnv(env map[string]string) (Config, error) {
	c := Config{
		Name:                env[nodeapi.KeyNodeName],
		Address:             env[nodeapi.KeyNodeAddress],
		InitialCluster:      env[nodeapi.KeyInitialEtcdCluster],
		InitialClusterState: env[nodeapi.KeyEtcdInitialClusterState],
		EtcdCACert:          env[nodeapi.KeyEtcdCACert],
		EtcdPeerCert:        env[nodeapi.KeyEtcdPeerCert],
		EtcdPeerKey:         env[nodeapi.KeyEtcdPeerKey],
		EtcdServerCert:      env[nodeapi.KeyEtcdServerCert],
		EtcdServerKey:       env[nodeapi.KeyEtcdServerKey],
		APIServerCert:       env[nodeapi.KeyAPIServerCert],
		APIServerKey:        env[nodeapi.KeyAPIServerKey],
		APIServerExtraArgs:  env[nodeapi.KeyAPIServerExtraArgs],
		KubeVersion:         env[nodeapi.KeyKubeVersion],
		DataDir:             env[nodeapi.KeyDataDir],
		StaticIPFile:        env[nodeapi.KeyStaticIPFile],
		PIDFile:             env[nodeapi.KeyPIDFile],
		StatusFile:          env[nodeapi.KeyStatusFile],

		ControlPlane:          env[nodeapi.KeyControlPlane],
		KubeAPIServerDir:      env[nodeapi.KeyKubeAPIServerDir],
		ServiceAccountKeyFile: env[nodeapi.KeyServiceAccountKeyFile],
		ServiceClusterIPRange: env[nodeapi.KeyServiceClusterIPRange],
	}
	var err error
	if c.EtcdClientPort, err = envPort(env, nodeapi.KeyEtcdClientPort, nodeapi.DefaultEtcdClientPort); err != nil {
		return Config{}, err
	}
	if c.EtcdPeerPort, err = envPort(env, nodeapi.KeyEtcdPeerPort, nodeapi.DefaultEtcdPeerPort); err != nil {
		return Config{}, err
	}
	if c.APIServerPort, err = envPort(env, nodeapi.KeyAPIServerPort, nodeapi.DefaultAPIServerPort); err != nil {
		return Config{}, err
	}
	if c.EtcdHeartbeat, err = envMillis(env, nodeapi.KeyEtcdHeartbeatMS, nodeapi.DefaultEtcdHeartbeat); err != nil {
		return Config{}, err
	}
	if c.EtcdElection, err = envMillis(env, nodeapi.KeyEtcdElectionMS, nodeapi.DefaultEtcdElection); err != nil {
		return Config{}, err
	}
	if v := env[nodeapi.KeyEtcdUnsafeNoFsync]; v != "" {
		b, perr := strconv.ParseBool(v)
		if perr != nil {
			return Config{}, errkind.Errorf(errkind.InvalidArgument, "%s=%q: want true or false", nodeapi.KeyEtcdUnsafeNoFsync, v)
		}
		c.EtcdUnsafeNoFsync = b
	}
	if c.InitialClusterState == "" {
		c.InitialClusterState = nodeapi.ClusterStateNew
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func envPort(env map[string]string, key string, def int) (int, error) {
	v := env[key]
	if v == "" {
		return def, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		return 0, errkind.Errorf(errkind.InvalidArgument, "%s=%q: want a TCP port 1-65535 (default %d)", key, v, def)
	}
	return p, nil
}

func envMillis(env map[string]string, key string, def time.Duration) (time.Duration, error) {
	v := env[key]
	if v == "" {
		return def, nil
	}
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 1 {
		return 0, errkind.Errorf(errkind.InvalidArgument, "%s=%q: want a positive number of milliseconds (default %d)", key, v, def.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, nil
}

var (
	memberNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	kubeVersionRE = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)([-+][0-9A-Za-z.+-]*)?$`)
)

// Validate checks c as Run needs it. Errors are of kind
// errkind.InvalidArgument, name the env key and say what would be valid.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return errkind.Errorf(errkind.InvalidArgument, format, args...)
	}
	if c.Name == "" {
		return bad("%s is empty: want the etcd member name, e.g. demo-master-0", nodeapi.KeyNodeName)
	}
	if !memberNameRE.MatchString(c.Name) {
		return bad("%s=%q: want letters, digits, '.', '_' or '-', e.g. demo-master-0", nodeapi.KeyNodeName, c.Name)
	}
	if err := checkLoopback(nodeapi.KeyNodeAddress, c.Address); err != nil {
		return err
	}
	for _, p := range []struct {
		key string
		v   int
	}{{nodeapi.KeyEtcdClientPort, c.EtcdClientPort}, {nodeapi.KeyEtcdPeerPort, c.EtcdPeerPort}, {nodeapi.KeyAPIServerPort, c.APIServerPort}} {
		if p.v < 1 || p.v > 65535 {
			return bad("%s=%d: want a TCP port 1-65535", p.key, p.v)
		}
	}
	if c.EtcdClientPort == c.EtcdPeerPort || c.EtcdClientPort == c.APIServerPort || c.EtcdPeerPort == c.APIServerPort {
		return bad("%s=%d, %s=%d and %s=%d must differ", nodeapi.KeyEtcdClientPort, c.EtcdClientPort,
			nodeapi.KeyEtcdPeerPort, c.EtcdPeerPort, nodeapi.KeyAPIServerPort, c.APIServerPort)
	}
	if c.InitialClusterState != nodeapi.ClusterStateNew && c.InitialClusterState != nodeapi.ClusterStateExisting {
		return bad("%s=%q: want %q or %q", nodeapi.KeyEtcdInitialClusterState, c.InitialClusterState, nodeapi.ClusterStateNew, nodeapi.ClusterStateExisting)
	}
	if err := c.validateEtcdTLS(); err != nil {
		return err
	}
	if err := c.validateInitialCluster(); err != nil {
		return err
	}
	if c.EtcdHeartbeat <= 0 || c.EtcdElection < 5*c.EtcdHeartbeat {
		return bad("%s=%d, %s=%d: want a positive heartbeat and an election timeout of at least 5 heartbeats (defaults %d and %d)",
			nodeapi.KeyEtcdHeartbeatMS, c.EtcdHeartbeat.Milliseconds(), nodeapi.KeyEtcdElectionMS, c.EtcdElection.Milliseconds(),
			nodeapi.DefaultEtcdHeartbeat.Milliseconds(), nodeapi.DefaultEtcdElection.Milliseconds())
	}
	for _, f := range []struct{ key, path string }{{nodeapi.KeyAPIServerCert, c.APIServerCert}, {nodeapi.KeyAPIServerKey, c.APIServerKey}} {
		if f.path == "" {
			return bad("%s is empty: the apiserver serves HTTPS only, want a PEM file path", f.key)
		}
		if err := checkFile(f.key, f.path); err != nil {
			return err
		}
	}
	if c.KubeVersion == "" {
		return bad("%s is empty: want a Kubernetes version such as v1.30.2", nodeapi.KeyKubeVersion)
	}
	if !kubeVersionRE.MatchString(c.KubeVersion) {
		return bad("%s=%q: want a Kubernetes version such as v1.30.2", nodeapi.KeyKubeVersion, c.KubeVersion)
	}
	if c.DataDir == "" {
		return bad("%s is empty: want the replica's persistent directory (etcd data goes to DATA_DIR/etcd)", nodeapi.KeyDataDir)
	}
	return c.validateControlPlane()
}

// Real reports whether the replica runs the real kube-apiserver.
func (c Config) Real() bool { return c.ControlPlane == nodeapi.ControlPlaneReal }

// ServiceCIDR is SERVICE_CLUSTER_IP_RANGE or its default.
func (c Config) ServiceCIDR() string {
	if c.ServiceClusterIPRange == "" {
		return nodeapi.DefaultServiceClusterIPRange
	}
	return c.ServiceClusterIPRange
}

// validateControlPlane checks CONTROL_PLANE and, for the real apiserver,
// what it needs beyond the stand-in (a missing binary is not a config
// error: the apiserver is refused, like a VM whose image cannot be pulled).
func (c Config) validateControlPlane() error {
	bad := func(format string, args ...any) error {
		return errkind.Errorf(errkind.InvalidArgument, format, args...)
	}
	switch c.ControlPlane {
	case "", nodeapi.ControlPlaneStandin:
		return nil
	case nodeapi.ControlPlaneReal:
	default:
		return bad("%s=%q: want %q or %q", nodeapi.KeyControlPlane, c.ControlPlane, nodeapi.ControlPlaneStandin, nodeapi.ControlPlaneReal)
	}
	if c.KubeAPIServerDir == "" {
		return bad("%s is empty: %s=real needs the directory of the kube-apiserver binaries (<dir>/<version>/kube-apiserver, make kube-apiserver)", nodeapi.KeyKubeAPIServerDir, nodeapi.KeyControlPlane)
	}
	if c.ServiceAccountKeyFile == "" {
		return bad("%s is empty: %s=real needs the cluster's service-account signing key (PEM)", nodeapi.KeyServiceAccountKeyFile, nodeapi.KeyControlPlane)
	}
	if err := checkFile(nodeapi.KeyServiceAccountKeyFile, c.ServiceAccountKeyFile); err != nil {
		return err
	}
	if !c.EtcdTLS() {
		return bad("%s=real needs etcd mTLS (%s and the other etcd certificate keys): the apiserver reaches its member with a client certificate", nodeapi.KeyControlPlane, nodeapi.KeyEtcdCACert)
	}
	if _, _, err := net.ParseCIDR(c.ServiceCIDR()); err != nil {
		return bad("%s=%q: want a CIDR such as %s", nodeapi.KeyServiceClusterIPRange, c.ServiceClusterIPRange, nodeapi.DefaultServiceClusterIPRange)
	}
	return nil
}

func (c Config) validateEtcdTLS() error {
	files := []struct{ key, path string }{
		{nodeapi.KeyEtcdCACert, c.EtcdCACert},
		{nodeapi.KeyEtcdPeerCert, c.EtcdPeerCert},
		{nodeapi.KeyEtcdPeerKey, c.EtcdPeerKey},
		{nodeapi.KeyEtcdServerCert, c.EtcdServerCert},
		{nodeapi.KeyEtcdServerKey, c.EtcdServerKey},
	}
	var set, missing []string
	for _, f := range files {
		if f.path == "" {
			missing = append(missing, f.key)
		} else {
			set = append(set, f.key)
		}
	}
	if len(set) == 0 {
		return nil
	}
	if len(missing) > 0 {
		return errkind.Errorf(errkind.InvalidArgument,
			"%s empty while %s set: set all five etcd certificate keys for mTLS, or none for plaintext http",
			strings.Join(missing, ", "), strings.Join(set, ", "))
	}
	for _, f := range files {
		if err := checkFile(f.key, f.path); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) validateInitialCluster() error {
	bad := func(format string, args ...any) error {
		return errkind.Errorf(errkind.InvalidArgument, "%s=%q: "+format, append([]any{nodeapi.KeyInitialEtcdCluster, c.InitialCluster}, args...)...)
	}
	if c.InitialCluster == "" {
		return errkind.Errorf(errkind.InvalidArgument, "%s is empty: want name=%s,... listing every member including this one", nodeapi.KeyInitialEtcdCluster, c.EtcdPeerURL())
	}
	self := false
	seen := map[string]bool{}
	for _, m := range strings.Split(c.InitialCluster, ",") {
		name, raw, ok := strings.Cut(strings.TrimSpace(m), "=")
		if !ok || name == "" || raw == "" {
			return bad("entry %q: want name=%s://ip:port", m, c.EtcdScheme())
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || u.Port() == "" {
			return bad("member %s: peer URL %q: want %s://ip:port", name, raw, c.EtcdScheme())
		}
		if u.Scheme != c.EtcdScheme() {
			return bad("member %s: scheme %q, want %q (etcd TLS is %s)", name, u.Scheme, c.EtcdScheme(), map[bool]string{true: "on", false: "off"}[c.EtcdTLS()])
		}
		if seen[raw] {
			return bad("peer URL %s listed twice", raw)
		}
		seen[raw] = true
		if name == c.Name {
			if raw != c.EtcdPeerURL() {
				return bad("this member (%s) has peer URL %s, want %s (from %s and %s)", name, raw, c.EtcdPeerURL(), nodeapi.KeyNodeAddress, nodeapi.KeyEtcdPeerPort)
			}
			self = true
		}
	}
	if !self {
		return bad("no entry for this member: want %s=%s among the members", c.Name, c.EtcdPeerURL())
	}
	return nil
}

// checkLoopback accepts a loopback IP, or one inside a prefix assigned to
// the loopback interface (the local provider's benchmark range,
// 198.19.N.0/24 on lo, which the kernel makes local as a whole): the
// local provider never binds an address another machine could route to.
func checkLoopback(key, v string) error {
	ip := net.ParseIP(v)
	if ip == nil {
		return errkind.Errorf(errkind.InvalidArgument, "%s=%q: want a loopback IP such as 127.0.42.2", key, v)
	}
	if ip.IsLoopback() || onLoopbackInterface(ip) {
		return nil
	}
	return errkind.Errorf(errkind.InvalidArgument, "%s=%q: want a loopback IP (127.0.0.0/8 or ::1) or one in a prefix on the loopback interface (such as 198.19.N.0/24, which 'hamaster local up --addresses benchmark' adds): the local provider never binds other addresses", key, v)
}

// onLoopbackInterface reports whether ip is inside a prefix assigned to a
// loopback interface of this machine.
func onLoopbackInterface(ip net.IP) bool {
	ifs, err := net.Interfaces()
	if err != nil {
		return false
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			continue
		}
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.Contains(ip) {
				return true
			}
		}
	}
	return false
}

func checkFile(key, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "%s: %w", key, err)
	}
	if st.IsDir() {
		return errkind.Errorf(errkind.InvalidArgument, "%s=%q is a directory, want a PEM file", key, path)
	}
	return nil
}
