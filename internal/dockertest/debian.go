package dockertest

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// DebianSuite and DebianMirror are what BuildDebianPythonImage bootstraps
// (BERTH_DEBIAN_MIRROR overrides the mirror, e.g. a local apt cache).
const (
	DebianSuite  = "bookworm"
	DebianMirror = "http://deb.debian.org/debian"
)

// CacheDir is where test images built from Debian packages are cached
// between runs: $BERTH_TEST_CACHE, else the user cache dir + /berth-test.
func CacheDir() (string, error) {
	if d := os.Getenv("BERTH_TEST_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "berth-test"), nil
}

// BuildDebianPythonImage imports an image made of a Debian root file system
// with python3 (debootstrap --variant=minbase, cached as a tarball in
// CacheDir) plus the Python script at scriptPath as /worker.py, run with
// `python3 -u /worker.py`. No registry is involved. It skips the test or
// benchmark when debootstrap is missing or Berth's tests do not run as
// root (debootstrap needs it); the first run downloads ≈ 40 MB from the
// mirror and takes a few minutes. The image is removed when the test ends.
func BuildDebianPythonImage(tb testing.TB, scriptPath string) string {
	tb.Helper()
	cli := Require(tb)
	script, err := os.ReadFile(scriptPath)
	if err != nil {
		tb.Fatal(err)
	}
	rootfs, err := debianPythonRootfs(tb)
	if err != nil {
		tb.Fatalf("debian python root file system: %v", err)
	}

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(appendFile(pw, rootfs, "worker.py", script)) }()
	ref := "berth-test/debian-python:" + Unique("")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc, err := cli.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref, client.ImageImportOptions{
		Changes: []string{`CMD ["python3", "-u", "/worker.py"]`,
			`ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`},
	})
	if err != nil {
		_ = pr.CloseWithError(err)
		tb.Fatalf("import image %s: %v", ref, err)
	}
	err = readStream(rc)
	_ = rc.Close()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			tb.Errorf("remove test image %s: %v", ref, err)
		}
	})
	if err != nil {
		tb.Fatalf("import image %s: %v", ref, err)
	}
	return ref
}

// debianPythonRootfs returns the cached root file system tarball, making
// it first if needed (under a lock file, so parallel runs build it once).
func debianPythonRootfs(tb testing.TB) (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, DebianSuite+"-python3.tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	bin, err := exec.LookPath("debootstrap")
	if err != nil {
		tb.Skipf("debootstrap is not installed (apt-get install debootstrap): cannot build the Debian python3 image (cache %s)", out)
	}
	if os.Geteuid() != 0 {
		tb.Skipf("debootstrap needs root: cannot build the Debian python3 image (or place a root file system tarball at %s)", out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lf, err := os.OpenFile(out+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(out); err == nil {
		return out, nil // built while we waited
	}
	root, err := os.MkdirTemp(dir, "rootfs-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(root)
	mirror := DebianMirror
	if m := os.Getenv("BERTH_DEBIAN_MIRROR"); m != "" {
		mirror = m
	}
	tb.Logf("building the Debian %s python3 root file system with debootstrap from %s (cached in %s)", DebianSuite, mirror, out)
	cmd := exec.Command(bin, "--variant=minbase", "--include=python3", DebianSuite, root, mirror)
	if b, err := cmd.CombinedOutput(); err != nil {
		tail := b
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return "", fmt.Errorf("debootstrap: %w\n%s", err, tail)
	}
	tmp := out + ".tmp"
	if b, err := exec.Command("tar", "-C", root, "-cf", tmp, ".").CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("tar: %w\n%s", err, b)
	}
	return out, os.Rename(tmp, out)
}

// appendFile copies the tarball at path to w with one more file at name.
func appendFile(w io.Writer, path, name string, data []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg && slimmed(hdr.Name) {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	return tw.Close()
}

// slimmed: files a worker image does not need (apt's package lists and
// downloaded .debs, documentation, translations), left out of the image:
// they are over half of the debootstrapped tree.
func slimmed(name string) bool {
	name = strings.TrimPrefix(name, "./")
	for _, p := range []string{"var/lib/apt/lists/", "var/cache/apt/", "usr/share/doc/", "usr/share/man/", "usr/share/locale/", "usr/share/info/"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
