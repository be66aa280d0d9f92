package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"

	"golang.org/x/term"

	"berth/mgmt"
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// printer writes a command's result as a table or as JSON.
type printer struct {
	w    io.Writer
	json bool
	ids  bool // -o id: only the "id" of each object
}

// column is one table column: a header and a dotted path into the object
// ("status.workers.idle"), or a func computing the cell.
type column struct {
	header string
	path   string
	fn     func(obj map[string]any) string
}

// JSON prints v indented.
func (p *printer) JSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", escapeControls(b))
	return err
}

// escapeControls writes the controls encoding/json leaves raw (C1, the
// bidi overrides and isolates; it escapes C0 itself) as \uXXXX: the same
// JSON value, which a terminal cannot act on.
func escapeControls(b []byte) []byte {
	if !bytes.ContainsFunc(b, func(r rune) bool { return r > 0x7f && mgmt.IsControl(r) }) {
		return b
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		if r > 0x7f && mgmt.IsControl(r) {
			fmt.Fprintf(&out, "\\u%04x", r)
			continue
		}
		out.WriteRune(r)
	}
	return out.Bytes()
}

// List prints a list of objects: JSON as is, or a table with cols.
func (p *printer) List(items []any, cols []column) error {
	if p.ids {
		for _, it := range items {
			if err := p.Object(it); err != nil {
				return err
			}
		}
		return nil
	}
	if p.json {
		if items == nil {
			items = []any{}
		}
		return p.JSON(items)
	}
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	hs := make([]string, len(cols))
	for i, c := range cols {
		hs[i] = c.header
	}
	fmt.Fprintln(tw, strings.Join(hs, "\t"))
	for _, it := range items {
		obj, _ := it.(map[string]any)
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = cell(obj, c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// Object prints one object: JSON as is, or one "field  value" line per
// top-level field (nested values as compact JSON).
func (p *printer) Object(v any) error {
	obj, ok := v.(map[string]any)
	if p.ids {
		id, _ := obj["id"].(string)
		if id == "" {
			return fmt.Errorf("-o id: the answer has no id")
		}
		_, err := fmt.Fprintln(p.w, id)
		return err
	}
	if p.json || !ok {
		return p.JSON(v)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\n", printable(k), printable(format(obj[k])))
	}
	return tw.Flush()
}

func cell(obj map[string]any, c column) string {
	if c.fn != nil {
		return printable(c.fn(obj))
	}
	return printable(format(lookup(obj, c.path)))
}

// printable is s as a table shows it: as is when every character is
// printable, else quoted as Go quotes strings ("ep\x1b[2J", "a\u202eb"),
// so no stored text (a record from before mgmt.CheckText, a worker's
// message) can move the cursor, clear the screen, retitle the terminal or
// reorder the line it is on.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || mgmt.IsControl(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// lookup follows a dotted path; nil when any step is missing.
func lookup(obj map[string]any, path string) any {
	var cur any = obj
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

// format renders a JSON value for a table cell.
func format(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return x
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = format(e)
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ",")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSpace(buf.String())
}

// progress shows a waiting command's state on stderr: on a terminal a
// spinner with the elapsed time rewritten in place, otherwise one line per
// change of state.
type progress struct {
	w   io.Writer
	tty bool

	mu      sync.Mutex
	msg     string
	start   time.Time
	stop    chan struct{}
	stopped chan struct{}
	shown   bool
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// Start begins showing msg.
func (p *progress) Start(msg string) {
	p.start = time.Now()
	p.msg = msg
	if !p.tty {
		fmt.Fprintln(p.w, msg)
		return
	}
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			p.mu.Lock()
			fmt.Fprintf(p.w, "\r\033[K%s %s %s", spinnerFrames[i%len(spinnerFrames)], p.msg, time.Since(p.start).Round(100*time.Millisecond))
			p.shown = true
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// Update changes the message (printed as a new line when not a terminal).
func (p *progress) Update(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if msg == p.msg {
		return
	}
	p.msg = msg
	if !p.tty {
		fmt.Fprintf(p.w, "%s (%s)\n", msg, time.Since(p.start).Round(100*time.Millisecond))
	}
}

// Stop clears the spinner line.
func (p *progress) Stop() {
	if p.stop == nil {
		return
	}
	close(p.stop)
	<-p.stopped
	p.stop = nil
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
