package remote

import (
	"bytes"
	"crypto/rand"
	"io"
	"sync"
)

// setupMax bounds the output a login shell's setup may print before the
// marker: past it, the filter gives up and passes everything through.
const setupMax = 1 << 20

// setupFilter passes one stream of a session through to out, less what
// the login shell's setup printed before the command ran: everything up to
// and including the marker line (the token, then the login shell's pid,
// the session's process group id), which may come mid-line after setup
// output without a newline. Until the marker, output is held back; once
// the session ends without one (the login shell failed before the
// command), flush passes it all through, so nothing the host said is lost.
type setupFilter struct {
	token string
	out   io.Writer
	known chan struct{} // closed once the marker has arrived

	mu      sync.Mutex
	pending []byte // held back: the setup's output, then a partial line
	setup   []byte // the setup's output, once the marker has arrived
	done    bool   // the marker arrived, or the filter gave up
	pgid    string // decimal; set before known is closed
}

// newSetupToken is a marker token no output is likely to carry.
func newSetupToken() string { return "hamaster-pgid-" + rand.Text()[:10] + ":" }

func newSetupFilter(out io.Writer, token string) *setupFilter {
	return &setupFilter{token: token, out: out, known: make(chan struct{})}
}

func (f *setupFilter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return f.out.Write(p)
	}
	from := len(f.pending) - len(f.token) - 24 // where a new marker could start
	f.pending = append(f.pending, p...)
	for i := max(from, 0); ; {
		j := bytes.Index(f.pending[i:], []byte(f.token))
		if j < 0 {
			break
		}
		j += i
		rest := f.pending[j+len(f.token):]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			break // the id's line is still on its way
		}
		if isDigits(rest[:nl]) {
			f.pgid = string(rest[:nl])
			f.setup = f.pending[:j]
			after := rest[nl+1:]
			f.pending, f.done = nil, true
			close(f.known)
			if _, err := f.out.Write(after); err != nil {
				return 0, err
			}
			return len(p), nil
		}
		i = j + 1 // not the marker (no id): look further
	}
	if len(f.pending) > setupMax {
		f.done = true
		held := f.pending
		f.pending = nil
		if _, err := f.out.Write(held); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flush passes through what was held back when no marker came.
func (f *setupFilter) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done && len(f.pending) > 0 {
		_, _ = f.out.Write(f.pending)
	}
	f.pending, f.done = nil, true
}

// setupOutput is what the login shell's setup printed before the marker,
// cut to its last 512 bytes, for a log line.
func (f *setupFilter) setupOutput() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return tail(f.setup, 512)
}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
