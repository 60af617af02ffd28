package metallabtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	stdlog "log"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamaster/hamaster/testbed/metal/metallab"
)

// APIServer is a stand-in kube-apiserver on one lab host: HTTPS on
// 0.0.0.0:6443 in the host's network namespace, /readyz 500 while the
// test says it is not ready, every other path 200 with the host's name.
// It can be stopped (gracefully or at once) and started again.
type APIServer struct {
	host     *metallab.Host
	cert     tls.Certificate
	notReady atomic.Bool
	mu       sync.Mutex
	srv      *http.Server
	done     chan struct{}
}

// StartAPIServer starts a stand-in on h serving cert; the test's end
// stops it.
func StartAPIServer(t testing.TB, h *metallab.Host, cert tls.Certificate) *APIServer {
	t.Helper()
	a := &APIServer{host: h, cert: cert}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Kill)
	return a
}

// quiet drops the stand-ins' own logs (TLS handshakes cut by checks).
var quiet = stdlog.New(io.Discard, "", 0)

// Start serves again after Stop or Kill.
func (a *APIServer) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, err := ListenIn(a.host.NS, ":6443")
	if err != nil {
		return fmt.Errorf("apiserver stand-in on %s: %w", a.host.Name, err)
	}
	a.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" && a.notReady.Load() {
				http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
				return
			}
			io.WriteString(w, a.host.Name)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{a.cert}},
		ErrorLog:  quiet,
	}
	a.done = make(chan struct{})
	srv, done := a.srv, a.done
	go func() {
		defer close(done)
		_ = srv.ServeTLS(l, "", "")
	}()
	return nil
}

// SetReady makes /readyz answer 200 (true) or 500 (false).
func (a *APIServer) SetReady(ready bool) { a.notReady.Store(!ready) }

// Running says whether it serves (started, not stopped since).
func (a *APIServer) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.srv != nil
}

// Stop shuts the server down gracefully (idle keep-alive connections
// closed, requests in flight finished), as a kube-apiserver does.
func (a *APIServer) Stop() {
	a.stop(func(srv *http.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
}

// Kill closes the listener and every connection at once, as a killed
// kube-apiserver's do.
func (a *APIServer) Kill() {
	a.stop(func(srv *http.Server) { _ = srv.Close() })
}

func (a *APIServer) stop(how func(*http.Server)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.srv == nil {
		return
	}
	how(a.srv)
	<-a.done
	a.srv = nil
}
