package dockertest

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	pathpkg "path"
	"path/filepath"
	"slices"
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
	script, err := os.ReadFile(scriptPath)
	if err != nil {
		tb.Fatal(err)
	}
	return BuildDebianImage(tb, DebianImage{
		Files: []ImageFile{{Name: "worker.py", Mode: 0o644, Data: script}},
		Cmd:   []string{"python3", "-u", "/worker.py"},
	})
}

// DebianImage describes an image BuildDebianImage makes: a Debian root
// file system with python3 and Packages (Debian package names), plus Files
// and the host directories Dirs, run with Cmd.
type DebianImage struct {
	Packages []string
	Files    []ImageFile
	// Dirs copies host directories into the image: image path → host
	// path (regular files and directories; __pycache__ left out).
	Dirs map[string]string
	Cmd  []string
	Env  []string // KEY=value, besides PATH
	// Keep leaves the image when the test ends (one image shared by a
	// package's tests): remove it with RemoveImage.
	Keep bool
}

// ImageFile is one file added to an image (Name relative to /).
type ImageFile struct {
	Name string
	Mode int64
	Data []byte
}

// BuildDebianImage imports the image d describes; the root file system of
// each package set is made once by debootstrap and cached as a tarball in
// CacheDir (the first run downloads the packages from the mirror, minutes;
// later runs take seconds). It skips the test (or fails it with
// BERTH_REQUIRE_DOCKER=1) when debootstrap is missing or the tests do not
// run as root. The image is removed when the test ends.
func BuildDebianImage(tb testing.TB, d DebianImage) string {
	tb.Helper()
	cli := Require(tb)
	rootfs, err := debianRootfs(tb, d.Packages)
	if err != nil {
		tb.Fatalf("debian root file system: %v", err)
	}
	files := append([]ImageFile(nil), d.Files...)
	for _, dst := range sortedKeys(d.Dirs) {
		fs, err := dirFiles(d.Dirs[dst], strings.TrimPrefix(dst, "/"))
		if err != nil {
			tb.Fatalf("add %s to the image: %v", d.Dirs[dst], err)
		}
		files = append(files, fs...)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(appendFiles(pw, rootfs, files)) }()
	ref := "berth-test/debian-python:" + Unique("")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	changes := []string{`ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`}
	for _, e := range d.Env {
		changes = append(changes, "ENV "+e)
	}
	if len(d.Cmd) > 0 {
		b, _ := json.Marshal(d.Cmd)
		changes = append(changes, "CMD "+string(b))
	}
	rc, err := cli.ImageImport(ctx, client.ImageImportSource{Source: pr, SourceName: "-"}, ref, client.ImageImportOptions{Changes: changes})
	if err != nil {
		_ = pr.CloseWithError(err)
		tb.Fatalf("import image %s: %v", ref, err)
	}
	err = readStream(rc)
	_ = rc.Close()
	if !d.Keep {
		tb.Cleanup(func() {
			if err := RemoveImage(ref); err != nil {
				tb.Errorf("remove test image %s: %v", ref, err)
			}
		})
	}
	if err != nil {
		tb.Fatalf("import image %s: %v", ref, err)
	}
	return ref
}

// RemoveImage removes a test image (and the images built on it); a
// missing one is no error.
func RemoveImage(ref string) error {
	cli, err := connect()
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// debianRootfs returns the cached root file system tarball of python3 and
// packages, making it first if needed (under a lock file, so parallel runs
// build it once).
func debianRootfs(tb testing.TB, packages []string) (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	pkgs := append([]string{"python3"}, packages...)
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	name := DebianSuite + "-python3.tar" // the name older caches have
	if len(pkgs) > 1 {
		sum := sha256.Sum256([]byte(strings.Join(pkgs, ",")))
		name = DebianSuite + "-python3-" + hex.EncodeToString(sum[:6]) + ".tar"
	}
	out := filepath.Join(dir, name)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	bin, err := exec.LookPath("debootstrap")
	if err != nil {
		unavailable(tb, "debootstrap is not installed (apt-get install debootstrap): cannot build the Debian python3 image (cache %s)", out)
	}
	if os.Geteuid() != 0 {
		unavailable(tb, "debootstrap needs root: cannot build the Debian python3 image (or place a root file system tarball at %s)", out)
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
	tb.Logf("building the Debian %s root file system (%s) with debootstrap from %s (cached in %s)", DebianSuite, strings.Join(pkgs, " "), mirror, out)
	cmd := exec.Command(bin, "--variant=minbase", "--include=python3", DebianSuite, root, mirror)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("debootstrap: %w\n%s", err, tail(b))
	}
	if len(pkgs) > 1 {
		// The other packages with apt inside the new root: debootstrap's
		// own configure pass trips on some (python3-bcrypt's).
		if err := aptInstall(root, pkgs); err != nil {
			return "", err
		}
	}
	tmp := out + ".tmp"
	if b, err := exec.Command("tar", "-C", root, "-cf", tmp, ".").CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("tar: %w\n%s", err, b)
	}
	return out, os.Rename(tmp, out)
}

// aptInstall installs pkgs inside the root file system at root (chroot,
// with /proc mounted while apt runs).
func aptInstall(root string, pkgs []string) error {
	proc := filepath.Join(root, "proc")
	if err := syscall.Mount("proc", proc, "proc", 0, ""); err != nil {
		return fmt.Errorf("mount /proc in the new root: %w", err)
	}
	defer syscall.Unmount(proc, syscall.MNT_DETACH)
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	for _, args := range [][]string{{"apt-get", "update", "-qq"}, append([]string{"apt-get", "install", "-y", "-qq", "--no-install-recommends"}, pkgs...), {"apt-get", "clean"}} {
		cmd := exec.Command("chroot", append([]string{root}, args...)...)
		cmd.Env = env
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("chroot %s: %w\n%s", strings.Join(args, " "), err, tail(b))
		}
	}
	return nil
}

func tail(b []byte) []byte {
	if len(b) > 3000 {
		return b[len(b)-3000:]
	}
	return b
}

// unavailable skips tb, or fails it when BERTH_REQUIRE_DOCKER=1.
func unavailable(tb testing.TB, format string, a ...any) {
	tb.Helper()
	if os.Getenv(EnvRequire) == "1" {
		tb.Fatalf(format+" (%s=1 is set)", append(a, EnvRequire)...)
	}
	tb.Skipf(format, a...)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// dirFiles reads the regular files under host as ImageFiles under prefix.
func dirFiles(host, prefix string) ([]ImageFile, error) {
	var out []ImageFile
	err := filepath.WalkDir(host, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(host, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out = append(out, ImageFile{Name: filepath.ToSlash(filepath.Join(prefix, rel)), Mode: 0o644, Data: b})
		return nil
	})
	return out, err
}

// appendFiles copies the tarball at path to w with files added (their
// parent directories too, when the tarball lacks them).
func appendFiles(w io.Writer, path string, files []ImageFile) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
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
		if hdr.Typeflag == tar.TypeDir {
			dirs[strings.Trim(strings.TrimPrefix(hdr.Name, "./"), "/")] = true
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	for _, file := range files {
		name := strings.TrimPrefix(file.Name, "/")
		var missing []string // parent directories the tarball lacks, deepest first
		for d := pathpkg.Dir(name); d != "." && !dirs[d]; d = pathpkg.Dir(d) {
			missing = append(missing, d)
		}
		for i := len(missing) - 1; i >= 0; i-- {
			if err := tw.WriteHeader(&tar.Header{Name: missing[i] + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: time.Unix(0, 0)}); err != nil {
				return err
			}
			dirs[missing[i]] = true
		}
		mode := file.Mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: name, Mode: mode, Size: int64(len(file.Data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(file.Data); err != nil {
			return err
		}
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
