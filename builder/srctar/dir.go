package srctar

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// readDockerignore reads dir/.dockerignore (none: no rules).
func readDockerignore(dir string) ([]Rule, error) {
	f, err := os.Open(filepath.Join(dir, ".dockerignore"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseIgnore(f)
}

// WriteDir writes dir as an uncompressed tar the way the builder
// writes a git commit's tree (srctar): the same files make the same
// bytes, so Berth builds the same source once (berth deploy, berth apply's
// build). keep (the Dockerfile) is
// never ignored.
func WriteDir(w io.Writer, dir, keep string) (files int, err error) {
	rules, err := readDockerignore(dir)
	if err != nil {
		return 0, err
	}
	var entries []Entry
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != keep && rel != ".dockerignore" && Ignored(rules, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := Entry{Name: rel, Mode: int64(fi.Mode().Perm())}
		switch {
		case fi.IsDir():
			e.Dir = true
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.Symlink, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			e.Size = fi.Size()
			e.Open = func() (io.ReadCloser, error) { return os.Open(p) }
		default:
			return nil // sockets, devices: not source
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return Write(w, entries)
}
