package lb

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// recorder is a LoadBalancer that records its calls, with or without
// the SessionEnder capability.
type recorder struct {
	LoadBalancer
	calls []string
	err   error // EndSessions's
}

func (r *recorder) DrainTarget(_ context.Context, name string) error {
	r.calls = append(r.calls, "drain "+name)
	return nil
}

type ender struct{ *recorder }

func (e ender) EndSessions(_ context.Context, name string) error {
	e.calls = append(e.calls, "end-sessions "+name)
	return e.err
}

// Drain ends the drained target's open connections after the grace
// period on an LB that lets them outlive a drain, and only there.
func TestDrainEndsSessionsAfterTheGrace(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		enders  bool
		grace   time.Duration
		endErr  error
		want    []string
		wantErr bool
	}{
		{name: "cloud LB", grace: time.Millisecond, want: []string{"drain cp-2"}},
		{name: "HAProxy", enders: true, grace: time.Millisecond, want: []string{"drain cp-2", "end-sessions cp-2"}},
		{name: "HAProxy, no grace", enders: true, want: []string{"drain cp-2", "end-sessions cp-2"}},
		{name: "HAProxy fails", enders: true, endErr: errors.New("socket gone"), want: []string{"drain cp-2", "end-sessions cp-2"}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{err: tt.endErr}
			var l LoadBalancer = r
			if tt.enders {
				l = ender{r}
			}
			err := Drain(context.Background(), l, "cp-2", tt.grace)
			if (err != nil) != tt.wantErr || !slices.Equal(r.calls, tt.want) {
				t.Errorf("Drain = %v, calls %q; want error %v, calls %q", err, r.calls, tt.wantErr, tt.want)
			}
		})
	}
}
