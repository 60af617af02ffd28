package errkindtest_test

import (
	"fmt"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/errkind/errkindtest"
)

func TestWant(t *testing.T) {
	t.Parallel()
	if errkindtest.Want(t, nil, "", errkind.InvalidArgument) {
		t.Error("no error wanted, Want says one was")
	}
	err := fmt.Errorf("listen is empty: %w", errkind.InvalidArgument)
	if !errkindtest.Want(t, err, "listen is empty", errkind.InvalidArgument) {
		t.Error("an error wanted, Want says none was")
	}
	if !errkindtest.Want(t, err, "listen", nil) {
		t.Error("an error wanted without a kind, Want says none was")
	}
}
