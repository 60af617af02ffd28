package etcdmember

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/hamaster/hamaster/errkind"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultDialTimeout   = 5 * time.Second
	DefaultStatusTimeout = 2 * time.Second
)

// Config says how to reach an etcd cluster.
//
// TLS is optional: with CACert, Cert, Key and TLS all empty the client speaks
// plaintext (only valid against http:// endpoints). CACert alone verifies the
// servers without presenting a client certificate; Cert and Key must be given
// together. TLS is an alternative to the three paths; setting both is an
// error.
type Config struct {
	// Endpoints are client URLs such as "https://127.0.0.1:2379". Each must
	// be an http or https URL with host:port and no path.
	Endpoints []string
	// CACert, Cert and Key are PEM file paths.
	CACert, Cert, Key string
	// TLS is used as is (cloned) instead of the file paths.
	TLS *tls.Config
	// DialTimeout bounds New's connectivity probe; 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// StatusTimeout bounds the Status call made to each member by Members
	// and the other health-dependent operations; 0 means
	// DefaultStatusTimeout.
	StatusTimeout time.Duration
	// DialContext, if set, opens every connection (for instance through an
	// SSH tunnel). addr is host:port taken from an endpoint or from a
	// member's advertised client URL.
	DialContext func(ctx context.Context, addr string) (net.Conn, error)
	// ClientURLs, if set, replaces the client URLs a started member
	// advertises with the URLs to reach it by, in every Member the client
	// returns and uses (kube-up's members all advertise
	// https://127.0.0.1:2379, each its own loopback: a provider that
	// tunnels names the master instead, and its DialContext finds it).
	ClientURLs func(m Member) []string
	// Logger receives the client's own log lines (membership changes at
	// Info, retries at Debug); nil discards them. The etcd client library's
	// own logging is always off.
	Logger *slog.Logger
}

// withDefaults returns cfg with zero durations and the logger filled in.
func (cfg Config) withDefaults() Config {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.StatusTimeout == 0 {
		cfg.StatusTimeout = DefaultStatusTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// validate checks cfg and builds its TLS configuration (nil for
// plaintext). Every problem is an errkind.InvalidArgument error naming the
// offending endpoint or file.
func (cfg Config) validate() (*tls.Config, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: at least one endpoint is required")
	}
	for _, ep := range cfg.Endpoints {
		if err := validateURL(ep); err != nil {
			return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: endpoint %q: %w", ep, err)
		}
	}
	if cfg.DialTimeout < 0 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: negative dial timeout %s", cfg.DialTimeout)
	}
	if cfg.StatusTimeout < 0 {
		return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: negative status timeout %s", cfg.StatusTimeout)
	}
	return cfg.tlsConfig()
}

// validateURL accepts http(s)://host:port with an optional trailing "/".
func validateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https, not %q", u.Scheme)
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must be scheme://host:port with nothing else")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return fmt.Errorf("host must be host:port: %w", err)
	}
	if host == "" {
		return errors.New("empty host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

func (cfg Config) tlsConfig() (*tls.Config, error) {
	files := cfg.CACert != "" || cfg.Cert != "" || cfg.Key != ""
	if cfg.TLS != nil {
		if files {
			return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: set either TLS or the CACert/Cert/Key files, not both")
		}
		return cfg.TLS.Clone(), nil
	}
	if !files {
		return nil, nil
	}
	if (cfg.Cert == "") != (cfg.Key == "") {
		return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: client certificate (%q) and key (%q) must be given together", cfg.Cert, cfg.Key)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CACert != "" {
		pem, err := readFile("CA certificate", cfg.CACert)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: CA certificate file %s holds no PEM certificate", cfg.CACert)
		}
		tc.RootCAs = pool
	}
	if cfg.Cert != "" {
		certPEM, err := readFile("client certificate", cfg.Cert)
		if err != nil {
			return nil, err
		}
		keyPEM, err := readFile("client key", cfg.Key)
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: client certificate %s / key %s: %w", cfg.Cert, cfg.Key, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

func readFile(what, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: %s file %s does not exist", what, path)
	case err != nil:
		return nil, errkind.Errorf(errkind.InvalidArgument, "etcd config: read %s file: %w", what, err)
	}
	return b, nil
}
