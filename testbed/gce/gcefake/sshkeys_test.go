package gcefake_test

import (
	"reflect"
	"testing"

	"github.com/hamaster/hamaster/testbed/gce/gcefake"
)

func TestParseSSHKeys(t *testing.T) {
	t.Parallel()
	const k1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq2Cv0Q5TQWk5Yp6Ko+9fX3zrsJX2ZmWkqO0Q4dbHSY"
	const k2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5Yc7LbWm8y2wOB1WZmKbh1sZ3lXQmUPTl1fGd3dD2x"
	for _, tc := range []struct {
		name, text string
		want       map[string][]string
	}{
		{"empty", "", map[string][]string{}},
		{"one", "alice:" + k1 + " alice@laptop", map[string][]string{"alice": {k1 + " alice@laptop"}}},
		{"gcloud's form with expiry comment", "bob:" + k1 + ` google-ssh {"userName":"bob@example.com","expireOn":"2030-01-01T00:00:00+0000"}`,
			map[string][]string{"bob": {k1 + ` google-ssh {"userName":"bob@example.com","expireOn":"2030-01-01T00:00:00+0000"}`}}},
		{"two users, two keys, blank lines", "\nalice:" + k1 + "\n\nalice:" + k2 + "\r\nbob:" + k2 + "\n",
			map[string][]string{"alice": {k1, k2}, "bob": {k2}}},
		{"malformed lines skipped", "no-colon " + k1 + "\n:" + k1 + "\ncarol:not a key\nda ve:" + k1 + "\n../x:" + k1,
			map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := gcefake.ParseSSHKeys(tc.text); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
