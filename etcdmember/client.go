// Package etcdmember is the one place hamaster talks to the etcd members API:
// it lists members with their health, grows the cluster through learners
// (AddLearner, WaitCaughtUp, Promote), moves leadership, removes members and
// takes snapshots, and holds the pure quorum arithmetic (Quorum, CanAddVoter,
// CanRemove) the workflows decide on.
//
// Every mutating call is idempotent, so a workflow may simply repeat a step
// after a crash or a timeout: AddLearner recognises a member by its peer URL,
// Promote of a voter and Remove of an absent member succeed without doing
// anything. Transient refusals by etcd (the "unhealthy cluster" answer of
// strict reconfiguration checking in the first seconds after a member
// connects, a learner not yet in sync, a leader election) are retried with
// backoff until the context ends, so the caller's context is what bounds an
// operation. A single attempt that gets no answer within 5s (etcd silently
// drops a configuration change proposed while another is in flight) is
// retried the same way, after checking whether it took effect.
//
// Members' health comes from a Status call to each member's advertised
// client URL, so those URLs must be reachable from here, directly or through
// Config.DialContext.
package etcdmember

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/hamaster/hamaster/errkind"
)

// Client talks to one etcd cluster. It is safe for concurrent use.
type Client struct {
	cfg Config
	tls *tls.Config
	log *slog.Logger
	cli *clientv3.Client
}

// New validates cfg and connects to the cluster. Configuration problems (a
// malformed endpoint, a missing certificate file) are errkind.InvalidArgument
// errors naming the endpoint or file. New then checks that at least one
// endpoint answers a member list within cfg.DialTimeout (and ctx); if none
// does, the error is errkind.Unavailable and carries the last connection
// error (refused, TLS handshake failure, ...). Close the client when done.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	tc, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, tls: tc, log: cfg.Logger}
	c.cli, err = c.dial(cfg.Endpoints)
	if err != nil {
		return nil, errkind.Errorf(errkind.InvalidArgument, "etcd client for %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := c.listMembers(pctx); err != nil {
		c.cli.Close()
		if errors.Is(err, errkind.Unavailable) {
			return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(cfg.Endpoints, ","), err)
		}
		return nil, errkind.Errorf(errkind.Unavailable, "connect to etcd at %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	return c, nil
}

// dial makes an etcd client for endpoints with c's TLS and dialer. Creating
// it does no I/O.
func (c *Client) dial(endpoints []string) (*clientv3.Client, error) {
	ccfg := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          c.cfg.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  c.tls,
		Logger:               zapToSlog(c.log),
	}
	if c.cfg.DialContext != nil {
		ccfg.DialOptions = append(ccfg.DialOptions, grpc.WithContextDialer(c.cfg.DialContext))
	}
	return clientv3.New(ccfg)
}

// Close releases the client's connections.
func (c *Client) Close() error {
	return c.cli.Close()
}

// Raw returns the underlying etcd client, for key-value use by callers
// (locks, journals). It is closed by Close.
func (c *Client) Raw() *clientv3.Client {
	return c.cli
}

// Member is an etcd member and, for members that answered, its status.
type Member struct {
	ID         uint64
	Name       string // "" until the member has started and published it
	PeerURLs   []string
	ClientURLs []string // empty until the member has started
	Learner    bool
	// Leader is true for the member the answering members (the one with the
	// highest raft term) report as leader.
	Leader bool
	// Healthy: the member answered Status within Config.StatusTimeout, knows
	// a leader and reports no errors (alarms).
	Healthy   bool
	RaftIndex uint64 // committed raft index as the member reports it
	DBSize    int64
	Version   string
	Err       string // why not healthy; "" when healthy
}

// IDHex is the member ID in etcd's usual hexadecimal form.
func (m Member) IDHex() string {
	return fmt.Sprintf("%x", m.ID)
}

// label names m in messages: "m-2 (8e9e05c52164694d)".
func (m Member) label() string {
	name := m.Name
	if name == "" {
		name = "unstarted member"
	}
	return fmt.Sprintf("%s (%s)", name, m.IDHex())
}

// errNotStarted is a member's Err when it has no client URLs yet.
const errNotStarted = "not started"

// Members lists the cluster's members with their status: one member list
// (linearizable, retried while the cluster is electing or unreachable), then
// a Status call to every started member in parallel, each bounded by
// Config.StatusTimeout. A member that does not answer is returned with
// Healthy false and Err saying why; a member without client URLs (a learner
// not started yet) has Err "not started". The result is sorted by name, then
// ID. Members fails only when the member list itself cannot be had.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	ms, err := c.listMembers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list etcd members: %w", err)
	}
	c.fillStatus(ctx, ms)
	if !anyHealthyVoter(ms) && ctx.Err() == nil {
		// The member list is a linearizable read (MemberList with
		// Linearizable: a ReadIndex through the leader, which needs a
		// quorum): a quorum just served it. No voter answering its
		// status within StatusTimeout is then this host's load, not
		// the cluster's health (every voter missed it at once in
		// .ci/run's race tier): asked again, each bounded
		// slowStatusFactor times as long.
		c.log.DebugContext(ctx, "no voter answered its status in time; asking again with a longer bound", "timeout", slowStatusFactor*c.cfg.StatusTimeout)
		slow := *c
		slow.cfg.StatusTimeout = slowStatusFactor * c.cfg.StatusTimeout
		for i, m := range ms {
			ms[i] = Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.Learner}
		}
		slow.fillStatus(ctx, ms)
	}
	return ms, nil
}

// slowStatusFactor is how much longer Members waits for the members'
// status the second time, when no voter answered the first.
const slowStatusFactor = 5

// anyHealthyVoter reports whether a voter of ms answered its status.
func anyHealthyVoter(ms []Member) bool {
	for _, m := range ms {
		if m.Healthy && !m.Learner {
			return true
		}
	}
	return false
}

// listMembers returns the member list without status, sorted.
func (c *Client) listMembers(ctx context.Context) ([]Member, error) {
	cc := pb.NewClusterClient(c.cli.ActiveConnection())
	var resp *pb.MemberListResponse
	err := c.retry(ctx, "member list", isTransient, func(ctx context.Context) error {
		var err error
		// Fail fast on a broken connection instead of waiting for it to
		// become ready, so the retry loop can report why it is broken.
		resp, err = cc.MemberList(ctx, &pb.MemberListRequest{Linearizable: true}, grpc.WaitForReady(false))
		return rpcError(ctx, err)
	})
	if err != nil {
		return nil, err
	}
	ms := make([]Member, 0, len(resp.Members))
	for _, pm := range resp.Members {
		ms = append(ms, Member{
			ID:         pm.ID,
			Name:       pm.Name,
			PeerURLs:   pm.PeerURLs,
			ClientURLs: pm.ClientURLs,
			Learner:    pm.IsLearner,
		})
		if m := &ms[len(ms)-1]; c.cfg.ClientURLs != nil && len(m.ClientURLs) > 0 {
			m.ClientURLs = c.cfg.ClientURLs(*m)
		}
	}
	sortMembers(ms)
	return ms, nil
}

func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
}

// fillStatus queries every started member in parallel and fills in the
// status fields and the leader.
func (c *Client) fillStatus(ctx context.Context, ms []Member) {
	sts := make([]*pb.StatusResponse, len(ms))
	var wg sync.WaitGroup
	for i := range ms {
		if len(ms[i].ClientURLs) == 0 {
			ms[i].Err = errNotStarted
			continue
		}
		wg.Go(func() {
			st, err := c.memberStatus(ctx, ms[i])
			if err != nil {
				ms[i].Err = err.Error()
				return
			}
			sts[i] = st
		})
	}
	wg.Wait()

	var leader, term uint64
	for i, st := range sts {
		if st == nil {
			continue
		}
		m := &ms[i]
		m.RaftIndex = st.RaftIndex
		m.DBSize = st.DbSize
		m.Version = st.Version
		switch {
		case len(st.Errors) > 0:
			m.Err = strings.Join(st.Errors, "; ")
		case st.Leader == 0:
			m.Err = "no leader"
		default:
			m.Healthy = true
		}
		if st.Leader != 0 && st.RaftTerm >= term {
			leader, term = st.Leader, st.RaftTerm
		}
	}
	for i := range ms {
		ms[i].Leader = leader != 0 && ms[i].ID == leader
	}
}

// memberStatus asks m for its status through its client URLs in turn, each
// try bounded by Config.StatusTimeout.
func (c *Client) memberStatus(ctx context.Context, m Member) (*pb.StatusResponse, error) {
	var errs []error
	for _, u := range m.ClientURLs {
		st, err := c.endpointStatus(ctx, u)
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// endpointStatus makes one Status call to endpoint, failing fast (with the
// connection error) if it cannot be reached.
func (c *Client) endpointStatus(ctx context.Context, endpoint string) (*pb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StatusTimeout)
	defer cancel()
	conn, err := c.cli.Dial(endpoint)
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", endpoint, err)
	}
	defer conn.Close()
	st, err := pb.NewMaintenanceClient(conn).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", endpoint, rpcError(ctx, err))
	}
	return st, nil
}

// withClientFor runs fn with an etcd client whose endpoints are the client
// URLs of members, and closes it afterwards.
func (c *Client) withClientFor(members []Member, fn func(*clientv3.Client) error) error {
	var eps []string
	for _, m := range members {
		eps = append(eps, m.ClientURLs...)
	}
	if len(eps) == 0 {
		return errkind.Errorf(errkind.Unavailable, "no client URL to reach etcd through")
	}
	cli, err := c.dial(eps)
	if err != nil {
		return fmt.Errorf("etcd client for %s: %w", strings.Join(eps, ","), err)
	}
	defer cli.Close()
	return fn(cli)
}
