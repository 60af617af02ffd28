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

// TestClientsKeepFailuresWithTheirTimes: requests are counted, paced or
// not, and each failure keeps its kind and its times.
func TestClientsKeepFailuresWithTheirTimes(t *testing.T) {
	t.Parallel()
	for _, pace := range []time.Duration{0, time.Millisecond} {
		var fail atomic.Bool
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if fail.Load() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
			}
		}))
		cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l := StartClients(ctx, srv.URL+"/version", cfg, pace)
		if err := l.Await(ctx, 20, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		failFrom := time.Now()
		fail.Store(true)
		// Until both kinds of client have seen the endpoint fail (on a
		// busy machine the new-connection client can be outpaced by 20
		// kept-alive requests and more); the bound is a hang guard.
		if err := wait.Until(ctx, 10*time.Millisecond, "a failure of each kind of client", func() (bool, error) {
			k := l.FailuresByKind()
			return k["new"] > 0 && k["kept-alive"] > 0, nil
		}); err != nil {
			t.Fatalf("hang guard: %v", err)
		}
		n, fails, dials := l.Stop()
		kinds := map[string]int{}
		for _, f := range fails {
			kinds[f.Kind]++
			if f.At.Before(failFrom) || f.At.Before(f.From) {
				t.Errorf("pace %v: failure %v before the endpoint failed (%v)", pace, f, failFrom.Format("15:04:05.000"))
			}
		}
		if n < 22 || kinds["new"] == 0 || kinds["kept-alive"] == 0 || dials == 0 {
			t.Errorf("pace %v: %d requests, failures by kind %v, %d kept-alive connections", pace, n, kinds, dials)
		}
		cancel()
		srv.Close()
	}
}
