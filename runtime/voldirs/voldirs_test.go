package voldirs_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/runtime/voldirs"
)

// entries are the names under root ("" for none: root absent).
func entries(t *testing.T, root string) []string {
	t.Helper()
	es, err := os.ReadDir(root)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func write(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.WriteFile(path, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDeletionSteps: each way through a volume's life leaves the
// directories it should — a deletion not stored (set aside, restored)
// keeps the files; one stored removes them; a creation not stored
// (created, removed) leaves nothing; steps on a volume without a
// directory are not errors.
func TestDeletionSteps(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		steps func(s *voldirs.Store) error
		want  []string // under root afterwards
		kept  bool     // v1's file is still at its path
	}{
		{"created", func(s *voldirs.Store) error { return nil }, []string{"v1"}, true},
		{"set aside", func(s *voldirs.Store) error { return s.SetAsideVolume("v1") }, []string{".deleting-v1"}, false},
		{"set aside, restored", func(s *voldirs.Store) error {
			return errorsOf(s.SetAsideVolume("v1"), s.RestoreVolume("v1"))
		}, []string{"v1"}, true},
		{"set aside, removed", func(s *voldirs.Store) error {
			return errorsOf(s.SetAsideVolume("v1"), s.RemoveVolume(ctx, "v1"))
		}, nil, false},
		{"removed without setting aside (an unstored creation)", func(s *voldirs.Store) error { return s.RemoveVolume(ctx, "v1") }, nil, false},
		{"another volume's steps", func(s *voldirs.Store) error {
			return errorsOf(s.SetAsideVolume("v2"), s.RestoreVolume("v2"), s.RemoveVolume(ctx, "v2"), s.GrowVolume(ctx, "v1", 99))
		}, []string{"v1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "volumes")
			s := voldirs.New(root, nil)
			st, err := s.CreateVolume(ctx, "v1", 10)
			if err != nil {
				t.Fatal(err)
			}
			if st.Path != filepath.Join(root, "v1") || st.UsedBytes != 0 || st.Claim != nil {
				t.Fatalf("created %+v", st)
			}
			write(t, filepath.Join(st.Path, "weights.bin"), 100)
			if err := tc.steps(s); err != nil {
				t.Fatal(err)
			}
			if got := entries(t, root); !slices.Equal(got, tc.want) {
				t.Errorf("under the root: %v, want %v", got, tc.want)
			}
			if _, err := os.Stat(filepath.Join(st.Path, "weights.bin")); (err == nil) != tc.kept {
				t.Errorf("the volume's file: %v, want kept %v", err, tc.kept)
			}
		})
	}
}

func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// A volume's directory is made once: a second creation of the id fails,
// and the first's files stay.
func TestCreateTwiceFails(t *testing.T) {
	ctx := context.Background()
	s := voldirs.New(t.TempDir(), nil)
	st, err := s.CreateVolume(ctx, "v1", 10)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(st.Path, "a"), 1)
	if _, err := s.CreateVolume(ctx, "v1", 10); err == nil {
		t.Fatal("a second creation of v1 succeeded")
	}
	if _, err := os.Stat(filepath.Join(st.Path, "a")); err != nil {
		t.Error(err)
	}
}

// A set-aside that cannot happen (something already at the aside path)
// fails and leaves the volume where it is.
func TestSetAsideBlocked(t *testing.T) {
	root := t.TempDir()
	s := voldirs.New(root, nil)
	st, err := s.CreateVolume(context.Background(), "v1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ".deleting-v1", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.SetAsideVolume("v1"); err == nil {
		t.Fatal("set aside onto a non-empty directory succeeded")
	}
	if fi, err := os.Stat(st.Path); err != nil || !fi.IsDir() {
		t.Errorf("the volume's directory after a failed set-aside: %v", err)
	}
}

// Usage is the files' bytes (directories and unreadable entries aside),
// measured again once usageTTL (30s) has passed, and forgotten with the
// volume.
func TestUsageMeasuredAndCached(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClock()
	s := voldirs.New(t.TempDir(), clock)
	st, err := s.CreateVolume(ctx, "v1", 10)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(st.Path, "a"), 4096)
	if err := os.Mkdir(filepath.Join(st.Path, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(st.Path, "sub", "b"), 100)
	if err := os.Symlink("a", filepath.Join(st.Path, "link")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		do    func()
		bytes int64
	}{
		{"first measure", func() {}, 4196},
		{"a file added: the cached figure", func() { write(t, filepath.Join(st.Path, "c"), 4) }, 4196},
		{"29s later: still cached", func() { clock.Advance(29 * time.Second) }, 4196},
		{"30s later: measured again", func() { clock.Advance(time.Second) }, 4200},
		{"removed and made anew: measured afresh", func() {
			if err := s.RemoveVolume(ctx, "v1"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CreateVolume(ctx, "v1", 10); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(st.Path, "d"), 7)
		}, 7},
	}
	for _, step := range steps {
		step.do()
		if got := s.VolumeStatus("v1"); got.UsedBytes != step.bytes || got.Path != st.Path {
			t.Errorf("%s: %+v, want %d bytes at %s", step.name, got, step.bytes, st.Path)
		}
	}
	if got := s.VolumeStatus("none"); got.UsedBytes != 0 || got.Path != s.Path("none") {
		t.Errorf("a volume without a directory: %+v", got)
	}
}
