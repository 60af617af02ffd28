package flavors

import (
	"context"
	"net"
	"slices"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
)

// DialMemberVia is an etcdmember.Config.DialContext for the members of
// masters reached through the provider's way in: the host of the address
// the etcd client dials names a running master (byHost maps it to the
// replica; what says which of its names it is), and on that master it
// dials to(the port dialled).
func DialMemberVia(d providers.MachineDialer, byHost map[string]string, what string, to func(port string) string) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		name, ok := byHost[host]
		if !ok {
			return nil, errkind.Errorf(errkind.NotFound, "etcd member on %s: no running master has that %s", host, what)
		}
		return d.DialMachine(ctx, name, to(port))
	}
}

// RunningMasters lists p's running replicas (all) and those of them not
// in exclude (through: the masters a flavor reaches etcd through).
func RunningMasters(ctx context.Context, p providers.Provider, exclude ...string) (all, through []providers.Replica, err error) {
	rs, err := p.Instances().List(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rs {
		if !r.Running() {
			continue
		}
		all = append(all, r)
		if !slices.Contains(exclude, r.Name) {
			through = append(through, r)
		}
	}
	return all, through, nil
}
