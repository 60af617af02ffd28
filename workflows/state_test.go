package workflows

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"testing"
	"time"
)

// TestJournalKeysReadOlderJournals: the typed keys read the data of a
// journal written before them (the release whose steps called
// Run.Get/Set with these strings), so that an unfinished run of that
// release resumes under this one; and what they write reads back.
func TestJournalKeysReadOlderJournals(t *testing.T) {
	t.Parallel()
	// The data of journals of the previous release, as it wrote them.
	const old = `{"workflow":"rolling-upgrade","params":{"version":"v1.34.4"},"started":"2026-11-28T10:00:00Z","finished":false,"steps":[],"data":{
		"address":"10.0.0.5","source":"m-0","lb_first":"m-0","snapshot":"/s/x.db","endpoint":"10.0.0.100:8443",
		"join_started":"true","removing":"8e9e05c52164694d","rebuilt":"true","drain-until":"2026-11-28T10:00:30.5Z",
		"member_id":"1","member_id_events":"2","cordoned:m-1":"true","cordoned:m-2":"",
		"in-place-from:m-1":"v1.33.13","last-known-good:m-1":"{\"version\":\"v1.33.13\"}",
		"slot-1":"m-1","slot-1-done":"true","slot-2":"m-2","slot-2-old":"m-2","slot-2-new":"m-2b",
		"renew-version:m-1":"v1.33.13","renewed:m-1":"true","rotate-drained:m-1":"true"}}`
	var j Journal
	if err := json.Unmarshal([]byte(old), &j); err != nil {
		t.Fatal(err)
	}
	r := &Run{journal: &j}
	texts := []struct {
		key  TextKey
		want string
	}{
		{keyAddress, "10.0.0.5"}, {keySource, "m-0"}, {keyLBFirst, "m-0"}, {keySnapshot, "/s/x.db"},
		{keyEndpoint, "10.0.0.100:8443"}, {keyRemoving, "8e9e05c52164694d"},
		{memberIDKey("main"), "1"}, {memberIDKey("events"), "2"},
		{fromKey("m-1"), "v1.33.13"}, {lkgKey("m-1"), `{"version":"v1.33.13"}`},
		{slotKey(1), "m-1"}, {slotKey(2), "m-2"}, {slotOldKey(2), "m-2"}, {slotNewKey(2), "m-2b"},
		{renewVersionKey("m-1"), "v1.33.13"}, {slotKey(3), ""},
	}
	for _, c := range texts {
		if got := c.key.Get(r); got != c.want {
			t.Errorf("%s: %q, want %q", c.key, got, c.want)
		}
	}
	flags := []struct {
		key  FlagKey
		want bool
	}{
		{keyJoinStarted, true}, {keyRebuilt, true}, {cordonedKey("m-1"), true}, {cordonedKey("m-2"), false},
		{slotDoneKey(1), true}, {slotDoneKey(2), false}, {renewedKey("m-1"), true}, {rotateDrainedKey("m-1"), true},
		{rotateDrainedKey("m-2"), false},
	}
	for _, c := range flags {
		if got := c.key.IsSet(r); got != c.want {
			t.Errorf("%s: %v, want %v", c.key, got, c.want)
		}
	}
	if at, err := keyDrainUntil.Get(r); err != nil || !at.Equal(time.Date(2026, 11, 28, 10, 0, 30, 5e8, time.UTC)) {
		t.Errorf("drain-until: %v, %v", at, err)
	}
	if got, want := slots(r), map[int]string{1: "m-1", 2: "m-2"}; !maps.Equal(got, want) {
		t.Errorf("slots: %v, want %v", got, want)
	}

	// What the keys write is durable and reads back; a cleared flag reads
	// as unset.
	store := NewJournalStore(filepath.Join(t.TempDir(), "state"), "c1")
	fresh := &Journal{Workflow: "remove-replica", Params: map[string]string{}, Data: map[string]string{}}
	w := &Run{journal: fresh, store: store}
	until := time.Date(2026, 11, 29, 1, 2, 3, 4, time.UTC)
	if err := keyDrainUntil.Set(w, until); err != nil {
		t.Fatal(err)
	}
	if err := cordonedKey("m-1").Mark(w); err != nil {
		t.Fatal(err)
	}
	if err := cordonedKey("m-1").Clear(w); err != nil {
		t.Fatal(err)
	}
	if err := keyAddress.Set(w, "10.0.0.9"); err != nil {
		t.Fatal(err)
	}
	saved, err := store.Load()
	if err != nil || saved == nil {
		t.Fatalf("load the journal: %v, %v", saved, err)
	}
	back := &Run{journal: saved}
	if at, err := keyDrainUntil.Get(back); err != nil || !at.Equal(until) {
		t.Errorf("drain-until read back: %v, %v; want %v", at, err, until)
	}
	if cordonedKey("m-1").IsSet(back) || keyAddress.Get(back) != "10.0.0.9" || keyAddress.In(saved) != "10.0.0.9" {
		t.Errorf("read back: %v", saved.Data)
	}
}
