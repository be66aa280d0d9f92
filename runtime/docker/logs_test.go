package docker

import (
	"bytes"
	"strings"
	"testing"
)

func TestLineWriterMergesByLine(t *testing.T) {
	var buf bytes.Buffer
	out, errw := &lineWriter{w: &buf}, &lineWriter{w: &buf}
	for _, step := range []struct {
		w *lineWriter
		s string
	}{
		{out, "o1\no2-"}, {errw, "e1\n"}, {out, "part\n"}, {errw, "e2"}, {out, "o3\n"},
	} {
		if n, err := step.w.Write([]byte(step.s)); err != nil || n != len(step.s) {
			t.Fatalf("Write(%q) = %d, %v", step.s, n, err)
		}
	}
	if err := out.flush(); err != nil {
		t.Fatal(err)
	}
	if err := errw.flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), "o1\ne1\no2-part\no3\ne2\n"; got != want {
		t.Fatalf("merged %q, want %q", got, want)
	}

	// An overlong partial line is emitted rather than held forever.
	buf.Reset()
	long := &lineWriter{w: &buf}
	_, _ = long.Write(bytes.Repeat([]byte("x"), maxPartialLine+1))
	if buf.Len() != maxPartialLine+2 || !strings.HasSuffix(buf.String(), "x\n") {
		t.Fatalf("overlong line: %d bytes written", buf.Len())
	}
}
