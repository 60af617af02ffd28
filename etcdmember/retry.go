package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hamaster/hamaster/errkind"
)

// newBackOff is the backoff between retries of a refused or failed call:
// from 50ms up to 500ms, so a refusal that clears (the ~5s strict
// reconfiguration window) is noticed quickly.
func newBackOff() backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     50 * time.Millisecond,
		RandomizationFactor: 0.2,
		Multiplier:          1.5,
		MaxInterval:         500 * time.Millisecond,
	}
}

// attemptTimeout bounds one attempt of a retried call. etcd does not always
// answer: raft silently drops a configuration change proposed while another
// is still being applied, and the server then waits on it until the
// client's deadline. An attempt that gets no answer in time is retried (the
// membership calls are idempotent) instead of using up the caller's whole
// context.
const attemptTimeout = 5 * time.Second

// errNoAnswer marks an attempt that ran out of attemptTimeout.
var errNoAnswer = errors.New("no answer")

// isNoAnswer reports an attempt that got no answer in attemptTimeout.
func isNoAnswer(err error) bool {
	return errors.Is(err, errNoAnswer)
}

// isUncertain reports a failure that leaves unknown whether the request took
// effect: no answer in time, or etcd's own "request timed out" answers
// (given when the request's deadline passes on the server first).
func isUncertain(err error) bool {
	return isNoAnswer(err) || errors.Is(err, rpctypes.ErrTimeout) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost)
}

// retry calls fn until it succeeds, fails with an error retryable rejects,
// or ctx ends. Each call gets a context bounded by attemptTimeout; an
// attempt that runs out of it fails with an error matching errNoAnswer.
// When ctx ends after retryable failures, the error wraps both the
// context's error and the last failure and is marked errkind.Unavailable.
func (c *Client) retry(ctx context.Context, op string, retryable func(error) bool, fn func(ctx context.Context) error) error {
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := fn(actx)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		switch {
		case err == nil:
			return struct{}{}, nil
		case ctx.Err() != nil:
			return struct{}{}, backoff.Permanent(err)
		case timedOut:
			err = fmt.Errorf("%w within %s: %w", errNoAnswer, attemptTimeout, err)
		}
		if !retryable(err) {
			return struct{}{}, backoff.Permanent(err)
		}
		last = err
		return struct{}{}, err
	},
		backoff.WithBackOff(newBackOff()),
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, d time.Duration) {
			c.log.DebugContext(ctx, "etcd call failed, retrying", "op", op, "err", err, "retry_in", d)
		}),
	)
	if err != nil && ctx.Err() != nil && last != nil && !errors.Is(last, ctx.Err()) {
		return errkind.Errorf(errkind.Unavailable, "%w (last error: %w)", ctx.Err(), last)
	}
	return err
}

// rpcError turns a gRPC error into etcd's typed error (comparable with the
// rpctypes.Err* values) and a deadline or cancellation into ctx's error.
func rpcError(ctx context.Context, err error) error {
	return clientv3.ContextError(ctx, err)
}

// descNotSupportedForLearner is what a learner answers to anything but
// Status and serializable reads (there is no rpctypes value for it).
var descNotSupportedForLearner = rpctypes.ErrorDesc(rpctypes.ErrGRPCNotSupportedForLearner)

// isTransient reports errors worth retrying for any idempotent call: etcd's
// Unavailable answers (no leader, leader changed, request timed out,
// unhealthy cluster, server stopped), a connection that cannot be made, and
// reaching a learner through an endpoint list.
func isTransient(err error) bool {
	if isNoAnswer(err) {
		return true
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Error() == descNotSupportedForLearner ||
			errors.Is(err, rpctypes.ErrNotLeader) || errors.Is(err, rpctypes.ErrTooManyRequests)
	}
	if s, ok := status.FromError(err); ok {
		return s.Code() == codes.Unavailable && !isTLSFailure(s.Message())
	}
	return false
}

// isTLSFailure recognises a connection refused by TLS (an untrusted server
// certificate, a missing or rejected client certificate): retrying cannot
// help, so it is reported at once.
func isTLSFailure(msg string) bool {
	return strings.Contains(msg, "authentication handshake failed") || strings.Contains(msg, "remote error: tls:")
}

// isUnhealthy reports etcd's strict reconfiguration refusal, "unhealthy
// cluster": the member that got the request has not been connected to enough
// peers for 5s. It clears by itself once the connections are old enough.
func isUnhealthy(err error) bool {
	return errors.Is(err, rpctypes.ErrUnhealthy)
}
