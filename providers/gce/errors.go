package gce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/api/googleapi"

	"github.com/hamaster/hamaster/errkind"
)

// mapErr turns an API error into the project's error kinds, wrapping it
// with what was being done. nil stays nil.
func mapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	code, reason := errCode(err)
	kind := kindOf(code, reason)
	if kind == nil {
		var ne net.Error
		if errors.As(err, &ne) || errors.Is(err, errConnRefused) || strings.Contains(err.Error(), "connection refused") {
			kind = errkind.Unavailable
		}
	}
	if kind == nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if reason != "" && !strings.Contains(err.Error(), reason) {
		return errkind.Errorf(kind, "%s: %w (%s)", what, err, reason)
	}
	return errkind.Errorf(kind, "%s: %w", what, err)
}

var errConnRefused = errors.New("connection refused")

// kindOf maps an HTTP code and a reason (a call's error reason, or an
// operation's error code) to a kind. A 409 is AlreadyExists only when it
// says so: IP_IN_USE_BY_ANOTHER_RESOURCE is also 409 and means "wait for
// the address to be released", which no caller may take as done.
func kindOf(code int, reason string) error {
	switch {
	case code == 404:
		return errkind.NotFound
	case strings.EqualFold(reason, "IP_IN_USE_BY_ANOTHER_RESOURCE"), reason == "resourceInUseByAnotherResource", reason == "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE":
		return errkind.FailedPrecondition
	case reason == "QUOTA_EXCEEDED", reason == "quotaExceeded":
		return errkind.FailedPrecondition
	case reason == "ZONE_RESOURCE_POOL_EXHAUSTED", reason == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS":
		return errkind.Unavailable
	case code == 409:
		return errkind.AlreadyExists
	case code == 429, code >= 500, reason == "rateLimitExceeded", reason == "userRateLimitExceeded":
		return errkind.Unavailable
	case code == 412, reason == "resourceInUseByAnotherResource", reason == "resourceNotReady":
		return errkind.FailedPrecondition
	case code == 400:
		return errkind.InvalidArgument
	}
	return nil
}

// errCode reads the HTTP code and the first reason of a Google API error.
func errCode(err error) (int, string) {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		reason := ""
		if len(ge.Errors) > 0 {
			reason = ge.Errors[0].Reason
		}
		return ge.Code, reason
	}
	var ae *apierror.APIError
	if errors.As(err, &ae) {
		return ae.HTTPCode(), ae.Reason()
	}
	return 0, ""
}

// reasonOf is the first reason of a Google API error ("" if none).
func reasonOf(err error) string {
	_, r := errCode(err)
	return r
}

// retry calls f until it succeeds, fails with an error that is not
// errkind.Unavailable, or the attempts (8, backoff 50 ms doubling to 2 s
// with jitter) or ctx run out. f must be safe to repeat: reads, and
// mutations carrying the same requestId.
func retry(ctx context.Context, what string, f func(ctx context.Context) error) error {
	delay := 50 * time.Millisecond
	var err error
	for attempt := 1; ; attempt++ {
		err = mapErr(what, f(ctx))
		if err == nil || !errors.Is(err, errkind.Unavailable) || attempt == 8 {
			return err
		}
		t := time.NewTimer(delay/2 + time.Duration(rand.Int64N(int64(delay))))
		select {
		case <-ctx.Done():
			t.Stop()
			return errkind.Errorf(errkind.Unavailable, "%s: %w (last: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}
