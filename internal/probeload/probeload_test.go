package probeload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/wait"
)

// TestCountsWhatClientsSee: requests on both connection kinds are
// counted, and a failing endpoint's answers are counted as failures.
func TestCountsWhatClientsSee(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if fail.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := Start(ctx, srv.URL+"/readyz", cfg, time.Millisecond)
	if err := wait.Until(ctx, time.Millisecond, "requests on both kinds", func() (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.res["new"].Requests > 3 && l.res["kept-alive"].Requests > 3, nil
	}); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := wait.Until(ctx, time.Millisecond, "failures on both kinds", func() (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.res["new"].Failed > 0 && l.res["kept-alive"].Failed > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	res := l.Stop()
	if Failed(res) < 2 || len(res["new"].Errors) == 0 {
		t.Fatalf("failures not counted: %+v", res)
	}
}
