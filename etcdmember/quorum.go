package etcdmember

import (
	"github.com/hamaster/hamaster/errkind"
)

// Quorum is the number of votes a raft cluster of voters voting members
// needs to commit anything: voters/2 + 1. Learners never vote.
func Quorum(voters int) int {
	return voters/2 + 1
}

// CanAddVoter decides from a Members result whether a new voter may be added
// (as a learner, later promoted). It refuses, with an
// errkind.FailedPrecondition error giving the reason, when any voter is
// unhealthy (a new voter raises the quorum, so with a voter down the
// addition could lose it) or when a learner or not-yet-started member is
// already pending (only one addition at a time). It only reads members.
func CanAddVoter(members []Member) error {
	voters := 0
	for _, m := range members {
		if !m.Learner {
			voters++
		}
	}
	if voters == 0 {
		return errkind.Errorf(errkind.FailedPrecondition, "the cluster has no voter")
	}
	for _, m := range members {
		if !m.Learner && !m.Healthy {
			return errkind.Errorf(errkind.FailedPrecondition,
				"voter %s is unhealthy: %s; adding a voter now could lose quorum (%d voters would need %d healthy)",
				m.label(), reason(m), voters+1, Quorum(voters+1))
		}
	}
	for _, m := range members {
		switch {
		case m.Learner:
			return errkind.Errorf(errkind.FailedPrecondition,
				"learner %s is pending; promote or remove it before adding another member", m.label())
		case m.Name == "" || len(m.ClientURLs) == 0:
			return errkind.Errorf(errkind.FailedPrecondition,
				"member %s with peer URLs %v has not started; start or remove it before adding another member", m.label(), m.PeerURLs)
		}
	}
	return nil
}

// CanRemove decides from a Members result whether the member id may be
// removed. Removing a learner is always allowed. For a voter it projects the
// cluster after the removal and refuses, with an errkind.FailedPrecondition
// error naming the numbers, when the remaining healthy voters would be fewer
// than the quorum of the remaining voters, when the voter is the last one, or
// when the cluster has already lost quorum (the removal could not be
// committed). An id not among members is an errkind.NotFound error. It only
// reads members.
func CanRemove(members []Member, id uint64) error {
	var victim *Member
	voters, healthy := 0, 0
	for i, m := range members {
		if m.ID == id {
			victim = &members[i]
		}
		if !m.Learner {
			voters++
			if m.Healthy {
				healthy++
			}
		}
	}
	if victim == nil {
		return errkind.Errorf(errkind.NotFound, "etcd member %x not found", id)
	}
	if victim.Learner {
		return nil
	}
	if voters == 1 {
		return errkind.Errorf(errkind.FailedPrecondition, "%s is the last voter; removing it would destroy the cluster", victim.label())
	}
	if healthy < Quorum(voters) {
		return errkind.Errorf(errkind.FailedPrecondition,
			"the cluster has %d voters of which %d healthy; quorum is %d, so removing %s cannot be committed",
			voters, healthy, Quorum(voters), victim.label())
	}
	left, leftHealthy := voters-1, healthy
	if victim.Healthy {
		leftHealthy--
	}
	if leftHealthy < Quorum(left) {
		return errkind.Errorf(errkind.FailedPrecondition,
			"removing %s leaves %d voters of which %d healthy; quorum is %d",
			victim.label(), left, leftHealthy, Quorum(left))
	}
	return nil
}

// reason is m.Err, or a placeholder when a result was built by hand.
func reason(m Member) string {
	if m.Err != "" {
		return m.Err
	}
	return "unhealthy"
}
