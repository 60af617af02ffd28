package bench

import (
	"io"
	"strings"
	"testing"
	"text/tabwriter"
)

// table renders what fill writes, tab-separated, as right-aligned
// columns: the benchmarks' result tables.
func table(fill func(tw io.Writer)) string {
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', tabwriter.AlignRight)
	fill(tw)
	_ = tw.Flush() // a strings.Builder does not fail
	return sb.String()
}

func TestTableAlignsRight(t *testing.T) {
	t.Parallel()
	got := table(func(tw io.Writer) {
		_, _ = io.WriteString(tw, "metric\tms\t\n")
		_, _ = io.WriteString(tw, "stall\t1200\t\n")
	})
	if want := "  metric    ms\n   stall  1200\n"; got != want {
		t.Errorf("table = %q, want %q", got, want)
	}
}
