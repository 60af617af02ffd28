package vip_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hamaster/hamaster/providers/metal/vip"
)

// The default priorities are distinct, high, and far enough apart that
// the backups' skew timers (RFC 5798 6.1) never expire within an advert's
// flight of each other: 78 ms apart for up to four masters, 19.5 ms at
// thirteen.
func TestDefaultPriority(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int
		want []int
	}{
		{1, []int{200}},
		{2, []int{200, 160}},
		{3, []int{200, 160, 120}},
		{5, []int{200, 170, 140, 110, 80}},
		{7, []int{200, 180, 160, 140, 120, 100, 80}},
	} {
		var got []int
		for i := range c.n {
			got = append(got, vip.DefaultPriority(i, c.n))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("n=%d: %v, want %v", c.n, got, c.want)
		}
	}
	skew := func(p int) time.Duration { return time.Duration(256-p) * 500 * time.Millisecond / 256 }
	for n := 2; n <= 13; n++ {
		for i := 1; i < n; i++ {
			hi, lo := vip.DefaultPriority(i-1, n), vip.DefaultPriority(i, n)
			if lo < 80 || hi > 200 || skew(lo)-skew(hi) < 19*time.Millisecond {
				t.Errorf("n=%d: priorities %d and %d: skews %v and %v", n, hi, lo, skew(hi), skew(lo))
			}
		}
	}
	// A place past the last master shares the lowest priority.
	if got := vip.DefaultPriority(5, 3); got != 120 {
		t.Errorf("DefaultPriority(5, 3) = %d, want 120", got)
	}
}
