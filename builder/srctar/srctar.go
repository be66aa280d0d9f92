// Package srctar writes a build context as a tar the same way from a
// directory (berth deploy) and from a git commit (the builder): sorted,
// with times, owners and all but the permission bits left out, so the
// same files make the same bytes — Berth names a build's image by their
// digest, and the same source builds once. It also reads .dockerignore.
package srctar

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Rule is one .dockerignore line.
type Rule struct {
	pattern string
	negate  bool
}

// ParseIgnore reads a .dockerignore. Patterns are path.Match globs on
// slash paths relative to the context; a pattern matching a directory
// ignores what is under it; "!" re-includes; the last match wins
// (Docker's rules, without "**").
func ParseIgnore(r io.Reader) ([]Rule, error) {
	var rules []Rule
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		r := Rule{}
		if strings.HasPrefix(l, "!") {
			r.negate, l = true, strings.TrimSpace(l[1:])
		}
		l = path.Clean(strings.TrimPrefix(filepath.ToSlash(l), "/"))
		if strings.Contains(l, "**") {
			return nil, fmt.Errorf(".dockerignore: %q: ** patterns are not supported by Berth", l)
		}
		if _, err := path.Match(l, ""); err != nil {
			return nil, fmt.Errorf(".dockerignore: %q: %w", l, err)
		}
		r.pattern = l
		rules = append(rules, r)
	}
	return rules, sc.Err()
}

// Ignored reports whether rel (a slash path) is ignored by rules.
func Ignored(rules []Rule, rel string) bool {
	out := false
	for _, r := range rules {
		for p := rel; p != "." && p != "/"; p = path.Dir(p) {
			if ok, _ := path.Match(r.pattern, p); ok {
				out = !r.negate
				break
			}
		}
	}
	return out
}

// Entry is one file of a context: a directory, a symbolic link (Symlink,
// its target) or a regular file of Size bytes that Open reads.
type Entry struct {
	Name    string // slash path relative to the context, no trailing slash
	Dir     bool
	Symlink string
	Mode    int64 // permission bits
	Size    int64
	Open    func() (io.ReadCloser, error)
}

// Write writes entries, sorted by name, as an uncompressed tar and
// returns how many regular files it holds.
func Write(w io.Writer, entries []Entry) (files int, err error) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.Name, Mode: e.Mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case e.Dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.Name+"/"
		case e.Symlink != "":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Symlink
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return 0, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		f, err := e.Open()
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(tw, f)
		f.Close()
		if err != nil {
			return 0, err
		}
		if n != e.Size {
			return 0, fmt.Errorf("%s changed while it was read", e.Name)
		}
		files++
	}
	return files, tw.Close()
}
