package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/wait"
)

// pollInterval is how often WaitCaughtUp and MoveLeader look at the cluster.
const pollInterval = 50 * time.Millisecond

// caughtUpSlack is how many raft entries a learner may trail the leader by
// and still count as caught up. etcd itself accepts a promotion at 90% of
// the leader's index; this is stricter so the promoted member does not
// start its life as the slowest voter.
const caughtUpSlack = 100

// whyUnknown is the reason of a wait that has not looked yet.
const whyUnknown = "not checked yet"

// AddLearner adds a learner (a non-voting member) with peerURL; name is the
// --name the new member will be started with. It returns the new member,
// which has no name and no client URLs until it is started (with
// initial-cluster-state "existing").
//
// AddLearner is idempotent: when a member already has peerURL it is returned
// without any change (whatever its role), and a lost answer to an earlier
// add (etcd's "Peer URLs already exists") is reconciled the same way. An
// attempt that gets no answer within 5s (etcd silently drops a
// configuration change proposed while another is being applied) is
// followed by a look at the member list before adding again. A
// member with peerURL that started under another name, or another member
// already named name, is an errkind.AlreadyExists error. If another member is
// pending (a learner, or a member that never started) AddLearner refuses
// with errkind.FailedPrecondition: only one addition at a time. etcd's
// "unhealthy cluster" refusal, given for about 5s after a member connects,
// is retried with backoff until ctx ends; any other failure is returned
// without retrying. A malformed peerURL is errkind.InvalidArgument.
func (c *Client) AddLearner(ctx context.Context, name, peerURL string) (Member, error) {
	if err := validateURL(peerURL); err != nil {
		return Member{}, errkind.Errorf(errkind.InvalidArgument, "add etcd member %s: peer URL %q: %w", name, peerURL, err)
	}
	ms, err := c.listMembers(ctx)
	if err != nil {
		return Member{}, fmt.Errorf("add etcd member %s: %w", name, err)
	}
	if m, ok := byPeerURL(ms, peerURL); ok {
		return c.existing(ctx, m, name, peerURL)
	}
	for _, m := range ms {
		if name != "" && m.Name == name {
			return Member{}, errkind.Errorf(errkind.AlreadyExists,
				"add etcd member %s: the name is already used by member %s with peer URLs %v", name, m.IDHex(), m.PeerURLs)
		}
	}
	for _, m := range ms {
		if m.Learner || len(m.ClientURLs) == 0 {
			return Member{}, errkind.Errorf(errkind.FailedPrecondition,
				"add etcd member %s: member %s with peer URLs %v is still pending (learner or not started); promote or remove it first",
				name, m.label(), m.PeerURLs)
		}
	}

	var (
		resp      *clientv3.MemberAddResponse
		uncertain bool // an earlier attempt got no answer
		already   Member
	)
	// etcd 3.7 also answers "member not found" to an add of a peer URL
	// whose previous owner was removed moments ago (observed: for ~1 s); a
	// refused add changed nothing, so it is retried like "unhealthy".
	retryable := func(err error) bool {
		return isUnhealthy(err) || isUncertain(err) || errors.Is(err, rpctypes.ErrMemberNotFound)
	}
	err = c.retry(ctx, "add learner", retryable, func(ctx context.Context) error {
		if uncertain {
			// The unanswered add may have happened: look before adding
			// again (etcd would refuse a second add of the peer URL, but
			// only after committing it).
			ms, err := c.listMembers(ctx)
			if err != nil {
				return err
			}
			if m, ok := byPeerURL(ms, peerURL); ok {
				already = m
				return nil
			}
		}
		var err error
		resp, err = c.cli.MemberAddAsLearner(ctx, []string{peerURL})
		uncertain = err != nil && (ctx.Err() != nil || isUncertain(err))
		return err
	})
	switch {
	case err == nil && resp == nil:
		return c.existing(ctx, already, name, peerURL)
	case errors.Is(err, rpctypes.ErrPeerURLExist) || errors.Is(err, rpctypes.ErrMemberExist):
		// An earlier or concurrent add got there first (two adds of one
		// peer URL in the same instant even get the same member ID).
		ms, lerr := c.listMembers(ctx)
		if lerr != nil {
			return Member{}, fmt.Errorf("add etcd member %s: peer URL %s exists, then: %w", name, peerURL, lerr)
		}
		if m, ok := byPeerURL(ms, peerURL); ok {
			return c.existing(ctx, m, name, peerURL)
		}
		return Member{}, fmt.Errorf("add etcd member %s: %w, yet no member lists it", name, err)
	case errors.Is(err, rpctypes.ErrTooManyLearners):
		return Member{}, errkind.Errorf(errkind.FailedPrecondition, "add etcd member %s: %w", name, err)
	case err != nil:
		return Member{}, fmt.Errorf("add etcd member %s as learner: %w", name, err)
	}
	m := Member{ID: resp.Member.ID, PeerURLs: resp.Member.PeerURLs, Learner: true, Err: errNotStarted}
	c.log.InfoContext(ctx, "added etcd learner", "name", name, "id", m.IDHex(), "peer_url", peerURL)
	return m, nil
}

// existing is AddLearner's answer when m already has peerURL.
func (c *Client) existing(ctx context.Context, m Member, name, peerURL string) (Member, error) {
	if m.Name != "" && name != "" && m.Name != name {
		return Member{}, errkind.Errorf(errkind.AlreadyExists,
			"add etcd member %s: peer URL %s already belongs to member %s", name, peerURL, m.label())
	}
	one := []Member{m}
	c.fillStatus(ctx, one)
	c.log.DebugContext(ctx, "etcd member already present", "name", name, "id", m.IDHex(), "peer_url", peerURL, "learner", m.Learner)
	return one[0], nil
}

func byPeerURL(ms []Member, peerURL string) (Member, bool) {
	for _, m := range ms {
		for _, u := range m.PeerURLs {
			if sameURL(u, peerURL) {
				return m, true
			}
		}
	}
	return Member{}, false
}

func sameURL(a, b string) bool {
	return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/")
}

func find(ms []Member, id uint64) (Member, bool) {
	for _, m := range ms {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// WaitCaughtUp waits until the learner id has caught up with the leader: its
// committed raft index is within a small slack of the leader's. It returns
// nil at once if id is already a voter, an errkind.NotFound error if there
// is no such member, and when ctx ends an errkind.Unavailable error saying
// how far behind (or why unreachable) the learner last was. It polls every
// 50ms and changes nothing.
func (c *Client) WaitCaughtUp(ctx context.Context, id uint64) error {
	return c.WaitCaughtUpObserved(ctx, id, nil)
}

// WaitCaughtUpObserved is WaitCaughtUp telling observe, when not nil, how
// far behind (or why unreachable) the learner is after every poll.
func (c *Client) WaitCaughtUpObserved(ctx context.Context, id uint64, observe func(state string)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var leader uint64 // cached between polls
	why := whyUnknown
	for {
		done, err := c.caughtUp(ctx, id, &leader, &why)
		if err != nil {
			return fmt.Errorf("wait for etcd member %x to catch up: %w", id, err)
		}
		if done {
			return nil
		}
		if observe != nil {
			observe(why)
		}
		select {
		case <-ctx.Done():
			return errkind.Errorf(errkind.Unavailable, "wait for etcd member %x to catch up: %w (%s)", id, ctx.Err(), why)
		case <-t.C:
		}
	}
}

// caughtUp is one poll of WaitCaughtUp. Transient trouble is reported
// through why, not as an error.
func (c *Client) caughtUp(ctx context.Context, id uint64, leader *uint64, why *string) (bool, error) {
	ms, err := c.listMembers(ctx)
	if err != nil {
		if ctx.Err() != nil {
			// Interrupted: keep the last real reason, if any.
			if *why == whyUnknown {
				*why = err.Error()
			}
			return false, nil
		}
		return false, err
	}
	m, ok := find(ms, id)
	if !ok {
		return false, errkind.Errorf(errkind.NotFound, "etcd member %x not found", id)
	}
	if !m.Learner {
		return true, nil
	}
	if len(m.ClientURLs) == 0 {
		*why = "learner not started"
		return false, nil
	}
	// The leader's index is read before the learner's, so a busy cluster
	// does not make the learner look further behind than it is.
	var (
		lst  *pb.StatusResponse
		lerr error
	)
	if l, ok := find(ms, *leader); ok && *leader != id {
		lst, lerr = c.memberStatus(ctx, l)
	}
	st, err := c.memberStatus(ctx, m)
	if err != nil {
		*why = "learner unreachable: " + err.Error()
		return false, nil
	}
	if st.Leader == 0 {
		*why = "learner knows no leader"
		return false, nil
	}
	if st.Leader != *leader || lst == nil {
		*why = "looking up the leader"
		if st.Leader == *leader && lerr != nil {
			*why = "leader unreachable: " + lerr.Error()
		}
		*leader = st.Leader
		return false, nil
	}
	if st.RaftIndex+caughtUpSlack >= lst.RaftIndex {
		return true, nil
	}
	*why = fmt.Sprintf("learner at raft index %d, leader at %d", st.RaftIndex, lst.RaftIndex)
	return false, nil
}

// Promote makes the learner id a voter. It is idempotent: a member that is
// already a voter is left alone and nil returned. An unknown id is an
// errkind.NotFound error. etcd's refusals that clear by themselves (learner
// not yet in sync with the leader, unhealthy cluster, not enough started
// members, leader election) are retried with backoff until ctx ends; then
// the error is errkind.Unavailable and carries the last refusal.
func (c *Client) Promote(ctx context.Context, id uint64) error {
	ms, err := c.listMembers(ctx)
	if err != nil {
		return fmt.Errorf("promote etcd member %x: %w", id, err)
	}
	m, ok := find(ms, id)
	if !ok {
		return errkind.Errorf(errkind.NotFound, "promote etcd member %x: not found", id)
	}
	if !m.Learner {
		return nil
	}
	retryable := func(err error) bool {
		return isTransient(err) || errors.Is(err, rpctypes.ErrMemberLearnerNotReady) ||
			errors.Is(err, rpctypes.ErrMemberNotEnoughStarted)
	}
	err = c.retry(ctx, "promote", retryable, func(ctx context.Context) error {
		_, err := c.cli.MemberPromote(ctx, id)
		return err
	})
	switch {
	case err == nil:
		c.log.InfoContext(ctx, "promoted etcd learner", "member", m.label())
		return nil
	case errors.Is(err, rpctypes.ErrMemberNotLearner):
		return nil // promoted by an earlier attempt whose answer was lost
	case errors.Is(err, rpctypes.ErrMemberNotFound):
		return errkind.Errorf(errkind.NotFound, "promote etcd member %s: %w", m.label(), err)
	default:
		return fmt.Errorf("promote etcd member %s: %w", m.label(), err)
	}
}

// MoveLeader makes sure awayFrom is not the leader. If it is not (or no
// longer) the leader it returns the current leader and nil without doing
// anything. Otherwise it transfers leadership to the healthy voter, other
// than awayFrom, with the highest raft index, asking the leader itself (etcd
// accepts the request only there), and waits until the cluster reports a
// leader other than awayFrom, which it returns. With no such voter it is an
// errkind.FailedPrecondition error. While the cluster has no leader, or
// the leader cannot be reached, it polls until ctx ends (another member may
// take over); a transfer that fails because leadership changed meanwhile
// or timed out is tried again.
func (c *Client) MoveLeader(ctx context.Context, awayFrom uint64) (newLeader uint64, err error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	why := whyUnknown
	wait := func() error {
		select {
		case <-ctx.Done():
			return errkind.Errorf(errkind.Unavailable, "move etcd leadership away from %x: %w (%s)", awayFrom, ctx.Err(), why)
		case <-t.C:
			return nil
		}
	}
	var target Member
	for target.ID == 0 {
		ms, err := c.Members(ctx)
		if err != nil {
			return 0, fmt.Errorf("move etcd leadership away from %x: %w", awayFrom, err)
		}
		leader, ok := leaderOf(ms)
		switch {
		case !ok:
			why = "no leader"
		case leader.ID != awayFrom:
			return leader.ID, nil
		case !leader.Healthy:
			// Only the leader accepts the request; if it cannot be
			// reached, the others will soon elect someone else.
			why = "leader unreachable: " + leader.Err
		default:
			cand, ok := transferee(ms, awayFrom)
			if !ok {
				return 0, errkind.Errorf(errkind.FailedPrecondition,
					"move etcd leadership away from %s: no healthy voter to move it to", leader.label())
			}
			err := c.withClientFor([]Member{leader}, func(cli *clientv3.Client) error {
				actx, cancel := context.WithTimeout(ctx, attemptTimeout)
				defer cancel()
				_, err := cli.MoveLeader(actx, cand.ID)
				return err
			})
			switch {
			case err == nil:
				c.log.InfoContext(ctx, "moved etcd leadership", "from", leader.label(), "to", cand.label())
				target = cand
				continue
			case ctx.Err() != nil:
				return 0, errkind.Errorf(errkind.Unavailable, "move etcd leadership from %s to %s: %w", leader.label(), cand.label(), err)
			case isTransient(err) || errors.Is(err, context.DeadlineExceeded) ||
				errors.Is(err, rpctypes.ErrBadLeaderTransferee) || strings.Contains(err.Error(), "leader transfer"):
				// The leader or the transferee changed meanwhile, or
				// the transfer timed out: look again.
				why = err.Error()
			default:
				return 0, fmt.Errorf("move etcd leadership from %s to %s: %w", leader.label(), cand.label(), err)
			}
		}
		if err := wait(); err != nil {
			return 0, err
		}
	}
	// The old leader answered once the transferee led in its eyes; wait
	// until the transferee agrees, so callers see a settled cluster.
	for {
		st, err := c.memberStatus(ctx, target)
		if err == nil && st.Leader != 0 && st.Leader != awayFrom {
			return st.Leader, nil
		}
		why = fmt.Sprintf("waiting for %s to report the new leader", target.label())
		if err := wait(); err != nil {
			return 0, err
		}
	}
}

func leaderOf(ms []Member) (Member, bool) {
	for _, m := range ms {
		if m.Leader {
			return m, true
		}
	}
	return Member{}, false
}

// transferee picks the healthy voter other than awayFrom with the highest
// raft index.
func transferee(ms []Member, awayFrom uint64) (Member, bool) {
	var best Member
	found := false
	for _, m := range ms {
		if m.Learner || !m.Healthy || m.ID == awayFrom {
			continue
		}
		if !found || m.RaftIndex > best.RaftIndex {
			best, found = m, true
		}
	}
	return best, found
}

// viaWait is how long Remove reads the members again while none of the
// voters but the one it removes is healthy.
const viaWait = 10 * time.Second

// Remove removes the member id. It is idempotent: a member that is already
// gone returns nil. The request is sent through the healthy voters other
// than id, never through id's own endpoint; while there are voters but
// none healthy, the members are read again for viaWait before the removal
// is refused (errkind.Unavailable).
//
// Remove does not refuse an unsafe removal by itself: gate it with CanRemove
// (a forced removal is the caller's decision). etcd's strict reconfiguration
// check still applies: its "unhealthy cluster" refusal, given for about 5s
// after members connect, is retried with backoff until ctx ends when
// CanRemove allows the removal; when CanRemove refuses it, etcd's refusal is
// permanent and returned at once as an errkind.FailedPrecondition error
// carrying both reasons. Leader elections are retried likewise.
//
// Removing the leader works, but costs the cluster an election during which
// writes stall and in-flight ones may be lost; call MoveLeader first.
func (c *Client) Remove(ctx context.Context, id uint64) error {
	var (
		victim Member
		unsafe error
		via    []Member
	)
	// A voter is healthy when it answered its status within the client's
	// StatusTimeout: on a busy host every voter can miss it at once. With
	// other voters but none healthy to send the removal through, the
	// members are read again, for viaWait at most, before the removal is
	// refused.
	wctx, cancel := context.WithTimeout(ctx, viaWait)
	defer cancel()
	err := wait.Until(wctx, 500*time.Millisecond, "a healthy voter to send the removal through", func() (bool, error) {
		ms, err := c.Members(ctx)
		if err != nil {
			return false, fmt.Errorf("remove etcd member %x: %w", id, err)
		}
		var ok bool
		if victim, ok = find(ms, id); !ok {
			return true, nil
		}
		unsafe = CanRemove(ms, id)
		via = via[:0]
		voters := 0
		for _, m := range ms {
			if m.ID != id && !m.Learner {
				voters++
				if m.Healthy {
					m.ClientURLs = withoutURLs(m.ClientURLs, victim.ClientURLs)
					via = append(via, m)
				}
			}
		}
		return len(via) > 0 || voters == 0, nil
	})
	if err != nil && (wctx.Err() == nil || ctx.Err() != nil) {
		return err // the members not read, or ctx ended
	}
	if victim.ID == 0 {
		return nil // gone already
	}
	if unsafe != nil {
		c.log.WarnContext(ctx, "removing etcd member against the quorum check", "member", victim.label(), "reason", unsafe)
	}
	if len(via) == 0 {
		if unsafe != nil {
			return fmt.Errorf("remove etcd member %s: no healthy voter to send the removal through: %w", victim.label(), unsafe)
		}
		return errkind.Errorf(errkind.Unavailable, "remove etcd member %s: no healthy voter to send the removal through", victim.label())
	}
	refusal := func(err error) bool {
		return isUnhealthy(err) || errors.Is(err, rpctypes.ErrMemberNotEnoughStarted)
	}
	retryable := func(err error) bool {
		if refusal(err) {
			return unsafe == nil
		}
		return isTransient(err)
	}
	err = c.withClientFor(via, func(cli *clientv3.Client) error {
		return c.retry(ctx, "remove", retryable, func(ctx context.Context) error {
			_, err := cli.MemberRemove(ctx, id)
			return err
		})
	})
	switch {
	case err == nil:
		c.log.InfoContext(ctx, "removed etcd member", "member", victim.label(), "was_leader", victim.Leader, "learner", victim.Learner)
		return nil
	case errors.Is(err, rpctypes.ErrMemberNotFound):
		return nil // removed by an earlier attempt whose answer was lost
	case unsafe != nil && refusal(err):
		return errkind.Errorf(errkind.FailedPrecondition, "remove etcd member %s: etcd refused (%w): %w", victim.label(), err, unsafe)
	default:
		return fmt.Errorf("remove etcd member %s: %w", victim.label(), err)
	}
}

func withoutURLs(urls, drop []string) []string {
	var out []string
	for _, u := range urls {
		keep := true
		for _, d := range drop {
			if sameURL(u, d) {
				keep = false
			}
		}
		if keep {
			out = append(out, u)
		}
	}
	return out
}

// InitialCluster returns the initial-cluster value ("name=peerURL,...") a
// member joining with initial-cluster-state "existing" must be started with:
// every member of members with each of its peer URLs, the member that has
// peerURL (the one just added, which has no name yet) under name, and
// name=peerURL added if no member has it. A member that never started is
// listed under its hex ID, since etcd matches members by peer URL, not name.
func InitialCluster(members []Member, name, peerURL string) string {
	var parts []string
	found := false
	for _, m := range members {
		n := m.Name
		if _, ok := byPeerURL([]Member{m}, peerURL); ok {
			n, found = name, true
		}
		if n == "" {
			n = m.IDHex()
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	if !found {
		parts = append(parts, name+"="+peerURL)
	}
	return strings.Join(parts, ",")
}
