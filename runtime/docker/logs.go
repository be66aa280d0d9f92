package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// maxPartialLine bounds how much of an unterminated line is held back
// before it is emitted anyway.
const maxPartialLine = 64 << 10

// Logs returns the container's stdout and stderr as plain text, merged
// line by line (a line from one stream is never split by the other).
// tail <= 0 means all lines; a zero since means from the start. With
// follow the reader ends when the container stops or ctx is cancelled.
// Close the reader to stop early.
func (d *Docker) Logs(ctx context.Context, id string, follow bool, tail int, since time.Time) (io.ReadCloser, error) {
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow}
	if tail > 0 {
		opts.Tail = strconv.Itoa(tail)
	}
	if !since.IsZero() {
		opts.Since = since.UTC().Format(time.RFC3339Nano)
	}
	body, err := d.cli.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil, fmt.Errorf("logs of container %s: %w", shortID(id), err)
	}
	pr, pw := io.Pipe()
	go func() {
		// Berth's containers have no TTY, so the stream is multiplexed.
		out, errw := &lineWriter{w: pw}, &lineWriter{w: pw}
		_, err := stdcopy.StdCopy(out, errw, body)
		if ferr := out.flush(); err == nil {
			err = ferr
		}
		if ferr := errw.flush(); err == nil {
			err = ferr
		}
		_ = body.Close()
		pw.CloseWithError(err) // nil: reader sees io.EOF
	}()
	return &logReader{PipeReader: pr, body: body}, nil
}

type logReader struct {
	*io.PipeReader
	body io.Closer
}

// Close stops the copier: closing the body unblocks a following read.
func (r *logReader) Close() error {
	_ = r.PipeReader.Close()
	return r.body.Close()
}

// lineWriter passes only whole lines to w, holding back a partial line
// until its newline arrives, so two streams sharing w interleave by line.
// StdCopy writes from one goroutine, so no locking is needed.
type lineWriter struct {
	w   io.Writer
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	if i := bytes.LastIndexByte(l.buf, '\n'); i >= 0 {
		if _, err := l.w.Write(l.buf[:i+1]); err != nil {
			return 0, err
		}
		l.buf = append(l.buf[:0], l.buf[i+1:]...)
	}
	if len(l.buf) > maxPartialLine {
		if err := l.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flush emits a held-back partial line, newline-terminated.
func (l *lineWriter) flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	l.buf = append(l.buf, '\n')
	_, err := l.w.Write(l.buf)
	l.buf = l.buf[:0]
	return err
}
