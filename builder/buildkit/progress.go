package buildkit

import (
	"fmt"
	"strings"

	bk "github.com/moby/buildkit/client"
	digest "github.com/opencontainers/go-digest"
)

// printer turns BuildKit's progress stream into log lines the way
// buildctl's plain output does: "#3 [2/3] COPY worker /worker" when a
// step starts, "#3 <output>" for its output, "#3 DONE 0.4s", "#3 CACHED"
// or "#3 ERROR: …" when it ends, and a line for each named status of an
// export ("#7 pushing layers").
type printer struct {
	line     func(string)
	num      map[digest.Digest]int
	names    map[digest.Digest]string
	started  map[digest.Digest]bool
	ended    map[digest.Digest]bool
	statuses map[string]bool
	partial  map[digest.Digest]string // output without its line break yet
}

func newPrinter(line func(string)) *printer {
	return &printer{line: line, num: map[digest.Digest]int{}, names: map[digest.Digest]string{}, started: map[digest.Digest]bool{},
		ended: map[digest.Digest]bool{}, statuses: map[string]bool{}, partial: map[digest.Digest]string{}}
}

func (p *printer) id(d digest.Digest) int {
	n, ok := p.num[d]
	if !ok {
		n = len(p.num) + 1
		p.num[d] = n
	}
	return n
}

func (p *printer) start(d digest.Digest) {
	if !p.started[d] {
		p.started[d] = true
		p.line(fmt.Sprintf("#%d %s", p.id(d), p.names[d]))
	}
}

func (p *printer) status(st *bk.SolveStatus) {
	for _, v := range st.Vertexes {
		p.names[v.Digest] = v.Name
		if v.Started == nil && !v.Cached {
			continue
		}
		p.start(v.Digest)
		if p.ended[v.Digest] {
			continue
		}
		switch {
		case v.Error != "":
			p.ended[v.Digest] = true
			p.flushVertex(v.Digest)
			p.line(fmt.Sprintf("#%d ERROR: %s", p.id(v.Digest), v.Error))
		case v.Cached:
			p.ended[v.Digest] = true
			p.line(fmt.Sprintf("#%d CACHED", p.id(v.Digest)))
		case v.Completed != nil:
			p.ended[v.Digest] = true
			p.flushVertex(v.Digest)
			p.line(fmt.Sprintf("#%d DONE %.1fs", p.id(v.Digest), v.Completed.Sub(*v.Started).Seconds()))
		}
	}
	for _, s := range st.Statuses {
		// Per-layer statuses are named by their digest: not worth a line.
		if s.Name == "" || strings.HasPrefix(s.ID, "sha256:") || p.statuses[s.ID] {
			continue
		}
		p.statuses[s.ID] = true
		p.start(s.Vertex)
		p.line(fmt.Sprintf("#%d %s", p.id(s.Vertex), s.Name))
	}
	for _, l := range st.Logs {
		p.start(l.Vertex)
		text := p.partial[l.Vertex] + string(l.Data)
		for {
			i := strings.IndexByte(text, '\n')
			if i < 0 {
				break
			}
			p.line(fmt.Sprintf("#%d %s", p.id(l.Vertex), strings.TrimRight(text[:i], "\r")))
			text = text[i+1:]
		}
		p.partial[l.Vertex] = text
	}
	for _, w := range st.Warnings {
		p.line(fmt.Sprintf("#%d WARNING: %s", p.id(w.Vertex), strings.TrimSpace(string(w.Short))))
	}
}

func (p *printer) flushVertex(d digest.Digest) {
	if t := p.partial[d]; t != "" {
		p.line(fmt.Sprintf("#%d %s", p.id(d), strings.TrimRight(t, "\r")))
		delete(p.partial, d)
	}
}

// flush writes what output is left without its line break.
func (p *printer) flush() {
	for d := range p.partial {
		p.flushVertex(d)
	}
}
