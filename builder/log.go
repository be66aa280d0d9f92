package builder

import (
	"bytes"
	"io"
	"sort"
	"strings"
	"sync"
)

// logBuffer is a running build's log, capped: past max bytes the first
// half is kept (the start says what was built) and the rest is the newest
// lines, with a line saying how much was cut. Readers follow it.
type logBuffer struct {
	mu      sync.Mutex
	max     int
	head    []byte // the first max/2 bytes, whole lines
	tail    []byte // the newest lines, at most max/2 bytes
	cut     int64  // bytes dropped between head and tail
	total   int64  // bytes ever written: readers' offsets
	closed  bool
	changed chan struct{} // closed (and replaced) on every change
	scrub   scrubber      // secret values replaced in every line
}

// scrubber replaces secret build arg values with "***", longest first
// (one value holding another is replaced whole).
type scrubber struct{ values []string }

func newScrubber(secrets map[string]string) scrubber {
	var s scrubber
	for _, v := range secrets {
		if v != "" {
			s.values = append(s.values, v)
		}
	}
	sort.Slice(s.values, func(i, j int) bool { return len(s.values[i]) > len(s.values[j]) })
	return s
}

func (s scrubber) apply(line string) string {
	for _, v := range s.values {
		line = strings.ReplaceAll(line, v, "***")
	}
	return line
}

func newLogBuffer(max int) *logBuffer {
	return &logBuffer{max: max, changed: make(chan struct{})}
}

// line appends one line.
func (l *logBuffer) line(s string) {
	s = l.scrub.apply(s) // before the cut: a value is never cut in two
	if len(s) > l.max/4 {
		s = s[:l.max/4] + "…"
	}
	b := append([]byte(s), '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.cut == 0 && len(l.tail) == 0 && len(l.head)+len(b) <= l.max/2 {
		l.head = append(l.head, b...)
	} else {
		l.tail = append(l.tail, b...)
		for len(l.tail) > l.max/2 {
			i := bytes.IndexByte(l.tail, '\n')
			l.cut += int64(i + 1)
			l.tail = l.tail[i+1:]
		}
	}
	l.total += int64(len(b))
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *logBuffer) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.changed)
	}
}

// bytes is the log as stored.
func (l *logBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]byte{}, l.head...)
	if l.cut > 0 {
		out = append(out, []byte("… ("+itoa(l.cut)+" bytes of log cut) …\n")...)
	}
	return append(out, l.tail...)
}

// tail is the last n lines.
func (l *logBuffer) lastLines(n int) string {
	b := l.bytes()
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// reader reads the log from its start; with follow it waits for more
// until the build ends, else it ends at what is there now. Bytes cut
// while a reader lagged are skipped.
func (l *logBuffer) reader(follow bool) io.ReadCloser {
	return &logReader{l: l, follow: follow, stop: make(chan struct{})}
}

type logReader struct {
	l      *logBuffer
	follow bool
	off    int64 // offset in the written stream
	once   sync.Once
	stop   chan struct{}
}

func (r *logReader) Read(p []byte) (int, error) {
	for {
		l := r.l
		l.mu.Lock()
		headEnd := int64(len(l.head))
		tailStart := headEnd + l.cut
		var avail []byte
		switch {
		case r.off < headEnd:
			avail = l.head[r.off:]
		case r.off < tailStart:
			r.off = tailStart
			avail = l.tail
		default:
			avail = l.tail[r.off-tailStart:]
		}
		changed, closed := l.changed, l.closed
		l.mu.Unlock()
		if len(avail) > 0 {
			n := copy(p, avail)
			r.off += int64(n)
			return n, nil
		}
		if closed || !r.follow {
			return 0, io.EOF
		}
		select {
		case <-changed:
		case <-r.stop:
			return 0, io.EOF
		}
	}
}

func (r *logReader) Close() error {
	r.once.Do(func() { close(r.stop) })
	return nil
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
