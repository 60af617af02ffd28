package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/providers"
)

// staticIP implements lb.StaticIP: the "access config" of a replica is the
// file its node reads on SIGHUP to also listen on the static IP.
type staticIP struct{ p *Provider }

func (s *staticIP) listener() string {
	return net.JoinHostPort(s.p.info.StaticIP, strconv.Itoa(providers.APIServerPort))
}

// Get implements lb.StaticIP.
func (s *staticIP) Get(ctx context.Context) (string, string, error) {
	rs, err := s.p.inst.List(ctx)
	if err != nil {
		return "", "", err
	}
	for _, r := range rs {
		b, err := os.ReadFile(s.p.l.rfile(r.Name, "static-ip"))
		if err == nil && strings.TrimSpace(string(b)) != "" {
			return s.p.info.StaticIP, r.Name, nil
		}
	}
	return s.p.info.StaticIP, "", nil
}

// Attach implements lb.StaticIP; it waits until the replica listens there.
func (s *staticIP) Attach(ctx context.Context, replica string) error {
	if _, err := s.p.inst.Get(ctx, replica); err != nil {
		return err
	}
	if s.p.lbProc().pid() != 0 {
		return errkind.Errorf(errkind.FailedPrecondition, "static IP %s is owned by the load balancer; delete it first", s.p.info.StaticIP)
	}
	_, holder, err := s.Get(ctx)
	if err != nil {
		return err
	}
	if holder != "" && holder != replica {
		return errkind.Errorf(errkind.FailedPrecondition, "static IP %s is attached to %s; detach it first", s.p.info.StaticIP, holder)
	}
	if err := fsutil.WriteFileAtomic(s.p.l.rfile(replica, "static-ip"), []byte(s.p.info.StaticIP+"\n"), 0o600); err != nil {
		return err
	}
	return s.waitListener(ctx, replica, true)
}

// Detach implements lb.StaticIP; it waits until the holder stops listening.
func (s *staticIP) Detach(ctx context.Context) error {
	_, holder, err := s.Get(ctx)
	if err != nil || holder == "" {
		return err
	}
	if err := fsutil.WriteFileAtomic(s.p.l.rfile(holder, "static-ip"), nil, 0o600); err != nil {
		return err
	}
	if err := s.waitListener(ctx, holder, false); err != nil {
		return err
	}
	return os.Remove(s.p.l.rfile(holder, "static-ip"))
}

// waitListener signals the node to re-read its static-IP file and waits
// until its status shows the listener bound (want) or gone (!want). A
// replica whose process is not running has nothing to wait for.
func (s *staticIP) waitListener(ctx context.Context, replica string, want bool) error {
	p := s.p.inst.proc(replica)
	if p.pid() == 0 {
		if want {
			return errkind.Errorf(errkind.FailedPrecondition, "replica %s is not running; cannot attach the static IP to it", replica)
		}
		return nil
	}
	addr := s.listener()
	what := fmt.Sprintf("replica %s to bind %s", replica, addr)
	if !want {
		what = fmt.Sprintf("replica %s to release %s", replica, addr)
	}
	signalled := false
	return poll(ctx, what, func() (bool, error) {
		if !signalled {
			signalled = p.signal(syscall.SIGHUP)
		}
		st, err := nodeapi.ReadStatus(s.p.l.rfile(replica, "status.json"))
		if err != nil {
			return false, nil
		}
		has := slices.Contains(st.Listeners, addr)
		if want && !has && st.StaticIPError != "" && st.StaticIP == s.p.info.StaticIP {
			return false, errors.New(st.StaticIPError + hint(s.p.info.StaticIP))
		}
		return has == want, nil
	})
}

// hint explains how to add loopback aliases where the host does not route
// all of 127.0.0.0/8 to lo (macOS).
func hint(ip string) string {
	return fmt.Sprintf("\n(the local provider needs loopback address %s: Linux routes all of 127.0.0.0/8 to lo; on macOS add it with 'sudo ifconfig lo0 alias %s up')", ip, ip)
}
