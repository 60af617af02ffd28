package providers

import "context"

// Recoverer is an optional capability of a provider's Instances: rebuild
// etcd from one replica when quorum is lost. Both methods stop every
// replica of the cluster first (a lost quorum cannot be repaired while
// old members run), leave the other replicas stopped with their data
// untouched, and boot the named replica alone again from its template.
// Providers that cannot reach a replica's disk do not implement it.
type Recoverer interface {
	// ForceNewCluster rewrites name's etcd data into a one-member cluster,
	// as etcd's --force-new-cluster does (same cluster ID, every key kept,
	// the other members removed). The data is copied aside first.
	ForceNewCluster(ctx context.Context, name string) error
	// RestoreSnapshot replaces name's etcd data by a restore of the
	// snapshot file with etcd's "snapshot restore" semantics: hash verified
	// first, one member, a new cluster ID. The old data is kept aside.
	RestoreSnapshot(ctx context.Context, name, snapshotPath string) error
}

// Forgetter is an optional capability of a provider's Instances whose
// machines outlive the cluster (metal hosts, never created or deleted by
// hamaster): Forget drops a machine that does not answer from the
// cluster's record, where Delete refuses to release a machine it cannot
// see is clean. What the machine carries stays on it; a provider that
// finds its masters by what they carry lists it again once it answers.
type Forgetter interface {
	Forget(ctx context.Context, name string) error
}
