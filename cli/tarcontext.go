package cli

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ignoreRule is one .dockerignore line.
type ignoreRule struct {
	pattern string
	negate  bool
}

// readDockerignore reads dir/.dockerignore (none: no rules). Patterns are
// filepath.Match globs on slash paths relative to dir; a pattern matching
// a directory ignores what is under it; "!" re-includes; the last match
// wins (Docker's rules, without "**").
func readDockerignore(dir string) ([]ignoreRule, error) {
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rules []ignoreRule
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		r := ignoreRule{}
		if strings.HasPrefix(l, "!") {
			r.negate, l = true, strings.TrimSpace(l[1:])
		}
		l = path.Clean(strings.TrimPrefix(filepath.ToSlash(l), "/"))
		if strings.Contains(l, "**") {
			return nil, fmt.Errorf(".dockerignore: %q: ** patterns are not supported by berth deploy", l)
		}
		if _, err := path.Match(l, ""); err != nil {
			return nil, fmt.Errorf(".dockerignore: %q: %w", l, err)
		}
		r.pattern = l
		rules = append(rules, r)
	}
	return rules, sc.Err()
}

func ignored(rules []ignoreRule, rel string) bool {
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

// writeContext writes dir as an uncompressed tar: sorted, with times,
// owners and all but the permission bits left out, so the same files make
// the same bytes (Berth tags the image by their digest: the same source
// builds once). keep (the Dockerfile) is never ignored.
func writeContext(w io.Writer, dir, keep string) (files int, err error) {
	rules, err := readDockerignore(dir)
	if err != nil {
		return 0, err
	}
	var paths []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != keep && rel != ".dockerignore" && ignored(rules, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		return 0, err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	for _, rel := range paths {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(p)
		if err != nil {
			return 0, err
		}
		hdr := &tar.Header{Name: rel, Mode: int64(fi.Mode().Perm()), ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return 0, err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case fi.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		default:
			continue // sockets, devices: not source
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return 0, err
		}
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return 0, err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return 0, err
			}
			if n != hdr.Size {
				return 0, fmt.Errorf("%s changed while it was read", rel)
			}
			files++
		}
	}
	return files, tw.Close()
}
