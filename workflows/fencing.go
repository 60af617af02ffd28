package workflows

import "context"

// fenced returns a context that ends, with ErrLockLost as its cause, as
// soon as the lock's session ends: a step in the middle of a wait stops
// at once instead of acting after another operator took the lock. Steps
// are also fenced one by one (Runner.Fence = Lock.Check): the session
// notices a lost lease only at its next keepalive, the check at once.
func fenced(ctx context.Context, l *Lock) (context.Context, func()) {
	fctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-l.Done():
			cancel(ErrLockLost)
		case <-fctx.Done():
		}
	}()
	return fctx, func() { cancel(nil) }
}
