package probeload

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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
	// awaitBoth waits until count is above more for both kinds.
	awaitBoth := func(what string, more int, count func(*Result) int) {
		t.Helper()
		if err := wait.Until(ctx, time.Millisecond, what+" on both kinds", func() (bool, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			return count(l.res["new"]) > more && count(l.res["kept-alive"]) > more, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	awaitBoth("requests", 3, func(r *Result) int { return r.Requests })
	fail.Store(true)
	awaitBoth("failures", 0, func(r *Result) int { return r.Failed })
	res := l.Stop()
	if Failed(res) < 2 || len(res["new"].Errors) == 0 {
		t.Fatalf("failures not counted: %+v", res)
	}
}

func TestGetJSON(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/version":
			_, _ = w.Write([]byte(`{"gitVersion":"v1.33.13"}`))
		case "/garbled":
			_, _ = w.Write([]byte(`{"gitVersion":`))
		default:
			http.Error(w, "etcd not ready", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		path, want, wantErr string
	}{
		{"/version", "v1.33.13", ""},
		{"/garbled", "", "unexpected EOF"},
		{"/readyz", "", "500 Internal Server Error: etcd not ready"},
	} {
		var v struct {
			GitVersion string `json:"gitVersion"`
		}
		err := GetJSON(context.Background(), srv.Client(), srv.URL+tc.path, &v)
		if v.GitVersion != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("GetJSON(%s) = %q, %v; want %q, error containing %q", tc.path, v.GitVersion, err, tc.want, tc.wantErr)
		}
	}
	if err := Get(context.Background(), srv.Client(), srv.URL+"/version"); err != nil {
		t.Errorf("Get(/version) = %v", err)
	}
}
