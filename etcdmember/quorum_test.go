package etcdmember_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
)

func TestQuorum(t *testing.T) {
	for voters, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		if got := etcdmember.Quorum(voters); got != want {
			t.Errorf("Quorum(%d) = %d, want %d", voters, got, want)
		}
	}
}

// cluster builds a member list from a compact spec: "V" healthy voter, "v"
// unhealthy voter, "L" healthy learner, "l" unhealthy learner. Member i is
// named m-(i+1) with ID i+1.
func cluster(spec string) []etcdmember.Member {
	var ms []etcdmember.Member
	for i, r := range spec {
		m := etcdmember.Member{
			ID:         uint64(i + 1),
			Name:       fmt.Sprintf("m-%d", i+1),
			PeerURLs:   []string{fmt.Sprintf("http://10.0.0.%d:2380", i+1)},
			ClientURLs: []string{fmt.Sprintf("http://10.0.0.%d:2379", i+1)},
			Learner:    r == 'L' || r == 'l',
			Healthy:    r == 'V' || r == 'L',
		}
		if !m.Healthy {
			m.Err = "connection refused"
		}
		ms = append(ms, m)
	}
	return ms
}

func TestCanRemove(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		remove  uint64
		wantErr error  // nil, errkind.FailedPrecondition or errkind.NotFound
		wantMsg string // substring of the error
	}{
		{"V", 1, errkind.FailedPrecondition, "last voter"},
		{"VV", 1, nil, ""},
		{"Vv", 1, errkind.FailedPrecondition, "2 voters of which 1 healthy; quorum is 2"},
		{"Vv", 2, errkind.FailedPrecondition, "cannot be committed"},
		{"VVV", 1, nil, ""},
		{"VVv", 1, errkind.FailedPrecondition, "removing m-1 (1) leaves 2 voters of which 1 healthy; quorum is 2"},
		{"VVv", 3, nil, ""},
		{"Vvv", 3, errkind.FailedPrecondition, "3 voters of which 1 healthy; quorum is 2"},
		{"VVVV", 4, nil, ""},
		{"VVVv", 1, nil, ""}, // 3 left, 2 healthy, quorum 2
		{"VVvv", 4, errkind.FailedPrecondition, "4 voters of which 2 healthy; quorum is 3"},
		{"VVVVV", 5, nil, ""},
		{"VVVvv", 1, errkind.FailedPrecondition, "leaves 4 voters of which 2 healthy; quorum is 3"},
		{"VVVvv", 5, nil, ""}, // 4 left, 3 healthy, quorum 3
		// Learners never count as voters, healthy or not.
		{"VL", 2, nil, ""},
		{"VL", 1, errkind.FailedPrecondition, "last voter"},
		{"VVvLL", 1, errkind.FailedPrecondition, "leaves 2 voters of which 1 healthy; quorum is 2"},
		{"Vvvl", 4, nil, ""}, // a learner can always go
		{"VVl", 1, nil, ""},
		{"VVV", 9, errkind.NotFound, "not found"},
	} {
		t.Run(fmt.Sprintf("%s-remove-%d", tc.spec, tc.remove), func(t *testing.T) {
			err := etcdmember.CanRemove(cluster(tc.spec), tc.remove)
			checkErr(t, err, tc.wantErr, tc.wantMsg)
		})
	}
}

func TestCanAddVoter(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		wantErr error
		wantMsg string
	}{
		{"V", nil, ""},
		{"VV", nil, ""},
		{"VVV", nil, ""},
		{"VVVV", nil, ""},
		{"VVVVV", nil, ""},
		{"", errkind.FailedPrecondition, "no voter"},
		{"Vv", errkind.FailedPrecondition, "voter m-2 (2) is unhealthy: connection refused; adding a voter now could lose quorum"},
		{"VVv", errkind.FailedPrecondition, "voter m-3 (3) is unhealthy"},
		{"vVVVV", errkind.FailedPrecondition, "voter m-1 (1) is unhealthy"},
		{"VL", errkind.FailedPrecondition, "learner m-2 (2) is pending"},
		{"VVVl", errkind.FailedPrecondition, "learner m-4 (4) is pending"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			checkErr(t, etcdmember.CanAddVoter(cluster(tc.spec)), tc.wantErr, tc.wantMsg)
		})
	}
	t.Run("unstarted", func(t *testing.T) {
		ms := cluster("VVV")
		ms = append(ms, etcdmember.Member{ID: 0xabc, PeerURLs: []string{"http://10.0.0.9:2380"}, Learner: true, Err: "not started"})
		checkErr(t, etcdmember.CanAddVoter(ms), errkind.FailedPrecondition, "unstarted member (abc) is pending")
	})
}

func checkErr(t *testing.T, err, wantKind error, wantMsg string) {
	t.Helper()
	if wantKind == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, wantKind) {
		t.Fatalf("error = %v, want kind %v", err, wantKind)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("error %q does not contain %q", err, wantMsg)
	}
}

func TestInitialCluster(t *testing.T) {
	ms := cluster("VV")
	ms = append(ms, etcdmember.Member{ID: 0xabc, PeerURLs: []string{"http://10.0.0.3:2380"}, Learner: true})
	got := etcdmember.InitialCluster(ms, "m-3", "http://10.0.0.3:2380")
	want := "m-1=http://10.0.0.1:2380,m-2=http://10.0.0.2:2380,m-3=http://10.0.0.3:2380"
	if got != want {
		t.Errorf("InitialCluster = %q, want %q", got, want)
	}
	got = etcdmember.InitialCluster(cluster("V"), "m-2", "http://10.0.0.2:2380")
	want = "m-1=http://10.0.0.1:2380,m-2=http://10.0.0.2:2380"
	if got != want {
		t.Errorf("InitialCluster (not yet added) = %q, want %q", got, want)
	}
}

func TestIDHex(t *testing.T) {
	if got := (etcdmember.Member{ID: 0x8e9e05c52164694d}).IDHex(); got != "8e9e05c52164694d" {
		t.Errorf("IDHex = %q", got)
	}
}
