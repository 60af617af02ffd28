package node

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"

	"github.com/hamaster/hamaster/certs"
)

// withClientCA makes the apiserver ask for client certificates and verify
// them against the cluster CA (ETCD_CA_CERT, the CA kube-up's
// --client-ca-file also names); a handshake without one still succeeds so
// that the health paths stay open, as on a real apiserver.
func withClientCA(cfg *tls.Config, caFile string) (*tls.Config, error) {
	if caFile == "" {
		return cfg, nil // no CA: nobody can authenticate; requireClientCert refuses
	}
	pool, err := certs.LoadPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("load client CA: %w", err)
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.VerifyClientCertIfGiven
	return cfg, nil
}

// requireClientCert answers 401 to a request whose connection did not
// present a client certificate verified against the cluster CA.
func requireClientCert(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, "Unauthorized: a client certificate signed by the cluster CA is required")
			return
		}
		h.ServeHTTP(w, r)
	})
}
