package node

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// A write etcd refused before proposing is repeated; one that may have
// been applied (a timeout) is not.
func TestRetryUnproposed(t *testing.T) {
	t.Parallel()
	dropped := errors.New("rpc error: code = Unknown desc = raft proposal dropped")
	tests := []struct {
		name      string
		errs      []error // what the write returns, call by call
		wantCalls int
		wantErr   error
	}{
		{name: "ok at once", errs: []error{nil}, wantCalls: 1},
		{name: "proposal dropped twice", errs: []error{dropped, dropped, nil}, wantCalls: 3},
		{name: "no leader", errs: []error{rpctypes.ErrNoLeader, nil}, wantCalls: 2},
		{name: "timeout is not repeated", errs: []error{rpctypes.ErrTimeout, nil}, wantCalls: 1, wantErr: rpctypes.ErrTimeout},
		{name: "leader changed is not repeated", errs: []error{rpctypes.ErrLeaderChanged, nil}, wantCalls: 1, wantErr: rpctypes.ErrLeaderChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := retryUnproposed(context.Background(), func() error {
				calls++
				return tt.errs[calls-1]
			})
			if calls != tt.wantCalls || !errors.Is(err, tt.wantErr) {
				t.Fatalf("calls = %d, err = %v; want %d, %v", calls, err, tt.wantCalls, tt.wantErr)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := retryUnproposed(ctx, func() error { return dropped }); err != dropped {
		t.Fatalf("ended context: %v, want the last error", err)
	}
}
