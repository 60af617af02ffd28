package remote

import (
	"strings"
	"testing"

	"github.com/hamaster/hamaster/internal/syncbuf"
)

func TestSetupFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		writes    func(token string) []string
		wantOut   func(token string) string
		wantSetup func(token string) string // nil: none
		wantPGID  string
	}{
		{
			name:     "marker first, in one write",
			writes:   func(tok string) []string { return []string{tok + "4242\nerr\n"} },
			wantOut:  same("err\n"),
			wantPGID: "4242",
		},
		{
			name:     "marker split across writes",
			writes:   func(tok string) []string { return []string{tok[:5], tok[5:] + "42", "42\n", "a", "b\n"} },
			wantOut:  same("ab\n"),
			wantPGID: "4242",
		},
		{
			name: "the setup's lines before the marker are left out",
			writes: func(tok string) []string {
				return []string{"bashrc says hi\n", "rm: cannot remove 'x'\n", tok + "7\n", "x"}
			},
			wantOut:   same("x"),
			wantSetup: same("bashrc says hi\nrm: cannot remove 'x'"),
			wantPGID:  "7",
		},
		{
			name:      "setup output without a newline before the marker",
			writes:    func(tok string) []string { return []string{"Welcome!", tok + "7\nout\n"} },
			wantOut:   same("out\n"),
			wantSetup: same("Welcome!"),
			wantPGID:  "7",
		},
		{
			name:    "no marker (the login shell failed): all of it, partial last line too",
			writes:  func(string) []string { return []string{"a\n", "b"} },
			wantOut: same("a\nb"),
		},
		{
			name:    "a spoof without the token's secret part",
			writes:  func(tok string) []string { return []string{"hamaster-pgid-x:1\n"} },
			wantOut: same("hamaster-pgid-x:1\n"),
		},
		{
			name:      "token without digits, then the marker",
			writes:    func(tok string) []string { return []string{tok + "\n", tok + "9\n", "z\n"} },
			wantOut:   same("z\n"),
			wantSetup: func(tok string) string { return tok },
			wantPGID:  "9",
		},
		{
			name:    "more setup output than setupMax: passed through",
			writes:  func(string) []string { return []string{strings.Repeat("y", setupMax), "yy\n"} },
			wantOut: same(strings.Repeat("y", setupMax+2) + "\n"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out syncbuf.Buffer
			f := newSetupFilter(&out, newSetupToken())
			for _, w := range tt.writes(f.token) {
				if n, err := f.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%.40q) = %d, %v", w, n, err)
				}
			}
			f.flush()
			got, want := string(out.Bytes()), tt.wantOut(f.token)
			if got != want || f.pgid != tt.wantPGID {
				t.Errorf("out %.80q pgid %q, want %.80q %q", got, f.pgid, want, tt.wantPGID)
			}
			wantSetup := ""
			if tt.wantSetup != nil {
				wantSetup = tt.wantSetup(f.token)
			}
			if s := f.setupOutput(); s != wantSetup {
				t.Errorf("setup output %q, want %q", s, wantSetup)
			}
			select {
			case <-f.known:
				if tt.wantPGID == "" {
					t.Error("known is closed without a marker")
				}
			default:
				if tt.wantPGID != "" {
					t.Error("known is still open after the marker")
				}
			}
		})
	}
}

// same is a wantOut that does not depend on the token.
func same(s string) func(string) string {
	return func(string) string { return s }
}

func TestTail(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("line of stderr\n", 200) + "last line\n"
	tests := []struct {
		name, in string
		ok       func(got string) bool
	}{
		{"short", "  boom\n", equals("boom")},
		{"empty", "", equals("")},
		{"invalid UTF-8", "bad \xff byte", equals("bad \ufffd byte")},
		{"long: cut at a line", long, func(got string) bool {
			return strings.HasPrefix(got, "…line of stderr\n") && strings.HasSuffix(got, "\nlast line") && len(got) <= 1024+len("…")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tail([]byte(tt.in), 1024); !tt.ok(got) {
				t.Errorf("tail(%.40q) = %.80q", tt.in, got)
			}
		})
	}
}

func equals(want string) func(string) bool {
	return func(got string) bool { return got == want }
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":          "'plain'",
		"it's":           `'it'\''s'`,
		"$(x) `y` \"z\"": "'$(x) `y` \"z\"'",
		"":               "''",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
