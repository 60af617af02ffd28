// Package errkindtest checks a table case's error in tests: its text and
// its kind.
package errkindtest

import (
	"errors"
	"strings"
	"testing"
)

// Want checks err against a case's expectation. With want "" err must be
// nil; otherwise err must contain want and, unless kind is nil, be of
// kind (errors.Is: errkind.InvalidArgument...). A missing, unexpected or
// other error fails t at once, a wrong kind is reported; wanted says
// whether the case expected an error (its checks end there).
func Want(t testing.TB, err error, want string, kind error) (wanted bool) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to contain %q", err, want)
	}
	if kind != nil && !errors.Is(err, kind) {
		t.Errorf("err %v is not of kind %v", err, kind)
	}
	return true
}
