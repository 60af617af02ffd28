package workflows

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hamaster/hamaster/providers"
)

// The data a workflow's steps record in its journal (Journal.Data) for
// later steps and later runs, each datum a typed key declared here: its
// name in the journal, as earlier releases wrote it (their journals
// resume under this one), and how its value is written and read. Steps
// reach the journal's data only through these keys.

// TextKey is a datum kept as written: an address, a name, a version, a
// path.
type TextKey string

// Get returns the recorded value ("" when none is).
func (k TextKey) Get(r *Run) string { return r.get(string(k)) }

// Set records v durably before returning.
func (k TextKey) Set(r *Run, v string) error { return r.set(string(k), v) }

// In returns the value recorded in j, a journal read outside a run.
func (k TextKey) In(j *Journal) string { return j.Data[string(k)] }

// Put records v in j, a journal written outside a run (saved by its
// caller).
func (k TextKey) Put(j *Journal, v string) { j.Data[string(k)] = v }

// FlagKey is a datum that is set or not: "true", or absent.
type FlagKey string

// IsSet reports whether the flag is recorded.
func (k FlagKey) IsSet(r *Run) bool { return r.get(string(k)) != "" }

// Mark records the flag durably before returning.
func (k FlagKey) Mark(r *Run) error { return r.set(string(k), "true") }

// Clear removes the flag durably before returning.
func (k FlagKey) Clear(r *Run) error { return r.set(string(k), "") }

// TimeKey is an instant, written as RFC 3339 with nanoseconds in UTC.
type TimeKey string

// Get returns the recorded instant; an error when none is recorded or
// it does not parse.
func (k TimeKey) Get(r *Run) (time.Time, error) {
	v := r.get(string(k))
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("journal %s: %q: %w", string(k), v, err)
	}
	return t, nil
}

// Set records t durably before returning.
func (k TimeKey) Set(r *Run, t time.Time) error {
	return r.set(string(k), t.UTC().Format(time.RFC3339Nano))
}

// add-replica's (and remove-replica's, which carries an unfinished add's
// address over: SupersedeAdd).
const (
	// keySource is the replica whose template add-replica clones.
	keySource TextKey = "source"
	// keyAddress is the new (or removed) replica's reserved address.
	keyAddress TextKey = "address"
	// keyLBFirst is the master whose static IP became the load
	// balancer's when the first add put one in front.
	keyLBFirst TextKey = "lb_first"
	// keySnapshot is the path of the etcd snapshot the workflow took.
	keySnapshot TextKey = "snapshot"
	// keyEndpoint is the endpoint a joining flavor's masters were moved
	// to (workflows/joiner.go).
	keyEndpoint TextKey = "endpoint"
	// keyJoinStarted: the flavor's join ran at least once.
	keyJoinStarted FlagKey = "join_started"
	// keyRemoving is the ID (hex) of the orphaned member being removed.
	keyRemoving TextKey = "removing"
	// keyRebuilt: recover's etcd was rebuilt.
	keyRebuilt FlagKey = "rebuilt"
	// keyDrainUntil is the end of remove-replica's drain grace, recorded
	// by drain-lb-target.
	keyDrainUntil TimeKey = "drain-until"
)

// memberIDKey is a replica's member ID (hex) in cluster ("member_id"
// for the main cluster, as journals have always said).
func memberIDKey(cluster string) TextKey {
	if cluster == providers.EtcdMain {
		return "member_id"
	}
	return TextKey("member_id_" + cluster)
}

// cordonedKey: the Node of the master called name was cordoned by this
// workflow (nodedrain.go).
func cordonedKey(name string) FlagKey { return FlagKey("cordoned:" + name) }

// fromKey is the version a master upgraded in place ran before.
func fromKey(name string) TextKey { return TextKey("in-place-from:" + name) }

// lkgKey is a master's last known-good template (JSON), for rollbacks.
func lkgKey(name string) TextKey { return TextKey("last-known-good:" + name) }

// The rolling upgrade's slots: slot k is the k-th master it replaces or
// upgrades.
func slotKey(k int) TextKey     { return TextKey(fmt.Sprintf("slot-%d", k)) }
func slotDoneKey(k int) FlagKey { return FlagKey(fmt.Sprintf("slot-%d-done", k)) }
func slotOldKey(k int) TextKey  { return TextKey(fmt.Sprintf("slot-%d-old", k)) }
func slotNewKey(k int) TextKey  { return TextKey(fmt.Sprintf("slot-%d-new", k)) }

// slots returns the recorded slots: the master of each, by k.
func slots(r *Run) map[int]string {
	out := map[int]string{}
	for key, v := range r.journal.Data {
		if k, err := strconv.Atoi(strings.TrimPrefix(key, "slot-")); err == nil && strings.HasPrefix(key, "slot-") {
			out[k] = v
		}
	}
	return out
}

// rotate-certs' per master: the version its renewal ran, that it passed
// its health gate, and that it is taken out for its rotation.
func renewVersionKey(name string) TextKey { return TextKey("renew-version:" + name) }
func renewedKey(name string) FlagKey      { return FlagKey("renewed:" + name) }
func rotateDrainedKey(name string) FlagKey {
	return FlagKey("rotate-drained:" + name)
}
