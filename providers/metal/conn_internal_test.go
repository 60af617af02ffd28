package metal

import (
	"context"
	"testing"
	"time"

	"github.com/hamaster/hamaster/remote"
	"github.com/hamaster/hamaster/remote/sshtest"
)

// A call that failed on a connection which has since ended forgets that
// connection only: a newer one, dialled by another call meanwhile and
// running a long command (a kubeadm upgrade), is neither forgotten nor
// closed under it.
func TestDropIfEndedForgetsOnlyItsConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := sshtest.Start(t, sshtest.Options{})
	dial := func() *remote.Client {
		t.Helper()
		c, err := remote.Dial(ctx, remote.Config{Addr: s.Addr, User: s.User, KeyFile: s.ClientKeyFile, KnownHostsFile: s.KnownHostsFile})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	older, newer := dial(), dial()
	p := &Provider{ssh: map[string]*remote.Client{"host-1": newer}}
	if err := older.Close(); err != nil {
		t.Fatal(err)
	}

	p.dropIfEnded("host-1", older) // the older connection's failed call
	if p.ssh["host-1"] != newer {
		t.Fatalf("the newer connection was forgotten: %v", p.ssh)
	}
	if err := newer.Err(); err != nil {
		t.Fatalf("the newer connection was closed: %v", err)
	}
	if _, _, err := newer.Run(ctx, "true"); err != nil {
		t.Fatalf("a command on the newer connection: %v", err)
	}

	p.dropIfEnded("host-1", newer) // alive: kept
	if p.ssh["host-1"] != newer {
		t.Fatal("a live connection was forgotten")
	}
	if err := newer.Close(); err != nil {
		t.Fatal(err)
	}
	p.dropIfEnded("host-1", newer) // ended: forgotten, the next call dials
	if _, ok := p.ssh["host-1"]; ok {
		t.Fatal("an ended connection was kept")
	}
}
