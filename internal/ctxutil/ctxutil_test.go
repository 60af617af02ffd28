package ctxutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/hamaster/hamaster/internal/ctxutil"
)

func TestWithoutDeadline(t *testing.T) {
	t.Parallel()
	// The parent's deadline passes: the child goes on, bounded by its own.
	parent, cancelParent := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancelParent()
	child, cancel := ctxutil.WithoutDeadline(parent, time.Hour)
	defer cancel()
	<-parent.Done()
	if err := child.Err(); err != nil {
		t.Fatalf("child ended with its parent's deadline: %v", err)
	}
	if dl, ok := child.Deadline(); !ok || time.Until(dl) < 59*time.Minute {
		t.Errorf("child's deadline %v, want an hour from now", dl)
	}

	// The parent is cancelled: so is the child.
	parent2, cancel2 := context.WithCancel(t.Context())
	child2, cancelChild2 := ctxutil.WithoutDeadline(parent2, time.Hour)
	defer cancelChild2()
	cancel2()
	<-child2.Done() // a hang here is the failure
	if err := child2.Err(); err != context.Canceled {
		t.Errorf("child of a cancelled parent: %v, want context.Canceled", err)
	}
}
