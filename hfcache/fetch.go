package hfcache

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	copyBuf      = 64 << 10
	maxAPIBody   = 32 << 20 // a revision listing
	maxRedirects = 10
	maxPathLen   = 1000
)

var sha256RE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// hubFile is one file of a revision, as the Hub lists it.
type hubFile struct {
	Path string
	Size int64
	Blob string // its blob's name: sha256 (large files) or git blob id
	OID  string // the git object id the Hub lists (of the LFS pointer for large files)
	LFS  bool
}

// fetch makes m's model complete on disk and returns its commit.
func (c *Cache) fetch(ctx context.Context, m *model) (string, error) {
	ref := m.ref
	unlock, err := c.repoMu.lock(ctx, ref.folder())
	if err != nil {
		return "", err
	}
	defer unlock()
	if commit, ok := c.readyCommit(ref); ok {
		return commit, nil
	}
	commit, files, err := c.revision(ctx, ref)
	if err != nil {
		return "", err
	}
	repo := filepath.Join(c.cfg.Dir, ref.folder())
	blobs := filepath.Join(repo, "blobs")
	var total, done int64
	for _, f := range files {
		total += f.Size
		if st, err := os.Stat(filepath.Join(blobs, f.Blob)); err == nil && st.Size() == f.Size {
			done += f.Size
		} else if st, err := os.Stat(filepath.Join(blobs, f.Blob+".incomplete")); err == nil && st.Size() <= f.Size {
			done += st.Size()
		}
	}
	m.done.Store(done)
	c.roomMu.Lock()
	_, err = c.makeRoomLocked(total-done, m)
	if err == nil {
		c.set(m, func(p *Progress) { p.State, p.Commit, p.Total = Downloading, commit, total })
	}
	c.roomMu.Unlock()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return "", diskErr(err)
	}

	// The files, at most Slots at once (the global slots bound all models).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
		next  = make(chan hubFile)
	)
	for range min(c.cfg.Slots, len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range next {
				if err := c.file(ctx, m, commit, blobs, f); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					cancel()
				}
			}
		}()
	}
feed:
	for _, f := range files {
		select {
		case next <- f:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return "", first
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := c.snapshot(repo, commit, files); err != nil {
		return "", err
	}
	if !ref.IsCommit() {
		if err := writeAtomic(filepath.Join(repo, "refs", filepath.FromSlash(ref.Revision)), []byte(commit)); err != nil {
			return "", diskErr(err)
		}
	}
	now := c.cfg.Now()
	_ = os.Chtimes(repo, now, now)
	return commit, nil
}

// revision asks the Hub for ref's commit and files (with sizes and hashes).
func (c *Cache) revision(ctx context.Context, ref Ref) (string, []hubFile, error) {
	u := c.cfg.Endpoint + "/api/models/" + ref.Org + "/" + ref.Name + "/revision/" + url.PathEscape(ref.Revision) + "?blobs=true"
	resp, _, err := c.get(ctx, u, 0)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, c.statusErr(ref, resp)
	}
	var info struct {
		Sha      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      *int64 `json:"size"`
			BlobID    string `json:"blobId"`
			LFS       *struct {
				Sha256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAPIBody)).Decode(&info); err != nil {
		return "", nil, fmt.Errorf("the Hub's revision listing of %s: %w", ref.Short(), err)
	}
	if !commitRE.MatchString(info.Sha) {
		return "", nil, fmt.Errorf("the Hub's revision listing of %s has no commit (sha %q)", ref.Short(), info.Sha)
	}
	if ref.IsCommit() && info.Sha != ref.Revision {
		return "", nil, fmt.Errorf("the Hub answered commit %s for %s", info.Sha, ref.Short())
	}
	if len(info.Siblings) > c.cfg.MaxFiles {
		return "", nil, fmt.Errorf("%s has %d files; Berth takes at most %d", ref.Short(), len(info.Siblings), c.cfg.MaxFiles)
	}
	files := make([]hubFile, 0, len(info.Siblings))
	for _, s := range info.Siblings {
		if err := checkPath(s.RFilename); err != nil {
			return "", nil, fmt.Errorf("%s lists a file the cache cannot hold: %w", ref.Short(), err)
		}
		f := hubFile{Path: s.RFilename, OID: s.BlobID}
		switch {
		case s.LFS != nil && sha256RE.MatchString(s.LFS.Sha256):
			f.Blob, f.Size, f.LFS = s.LFS.Sha256, s.LFS.Size, true
		case s.Size != nil && commitRE.MatchString(s.BlobID):
			f.Blob, f.Size = s.BlobID, *s.Size
		default:
			return "", nil, fmt.Errorf("the Hub's listing of %s gives no size and hash for %s", ref.Short(), s.RFilename)
		}
		if f.Size < 0 {
			return "", nil, fmt.Errorf("the Hub's listing of %s gives %s a negative size", ref.Short(), s.RFilename)
		}
		files = append(files, f)
	}
	return info.Sha, files, nil
}

// checkPath accepts a repository file path that stays inside a snapshot.
func checkPath(p string) error {
	if p == "" || len(p) > maxPathLen || strings.ContainsAny(p, "\\\x00") || strings.HasPrefix(p, "/") ||
		strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%q is not a safe relative path", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("%q is not a safe relative path", p)
		}
	}
	return nil
}

// file puts one file's blob in place: resumed from its .incomplete file,
// checked against its hash, then renamed to its name.
func (c *Cache) file(ctx context.Context, m *model, commit, blobs string, f hubFile) error {
	final := filepath.Join(blobs, f.Blob)
	if st, err := os.Stat(final); err == nil && st.Size() == f.Size {
		return nil
	}
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	part := final + ".incomplete"
	fh, err := os.OpenFile(part, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return diskErr(err)
	}
	defer fh.Close()
	h := newHasher(f)
	have, err := io.Copy(h, io.LimitReader(fh, f.Size+1))
	if err != nil {
		return diskErr(err)
	}
	if have > f.Size { // longer than the file (not counted as done): start again
		if err := fh.Truncate(0); err != nil {
			return diskErr(err)
		}
		have, h = 0, newHasher(f)
	}
	if have < f.Size {
		if err := c.transfer(ctx, m, commit, f, fh, h, have); err != nil {
			return err
		}
	}
	if got := h.sum(); got != f.Blob {
		// A wrong byte: the partial file cannot be trusted; start again.
		_ = fh.Truncate(0)
		m.done.Add(-f.Size)
		return fmt.Errorf("%s of %s: %s mismatch (got %s, want %s): the transfer was corrupted and is downloaded again",
			f.Path, m.ref.Short(), h.name, got, f.Blob)
	}
	if err := fh.Sync(); err != nil {
		return diskErr(err)
	}
	if err := fh.Close(); err != nil {
		return diskErr(err)
	}
	if err := os.Rename(part, final); err != nil {
		return diskErr(err)
	}
	return nil
}

// transfer appends the rest of f from offset have to fh and h.
func (c *Cache) transfer(ctx context.Context, m *model, commit string, f hubFile, fh *os.File, h *hasher, have int64) error {
	u := c.cfg.Endpoint + "/" + m.ref.Org + "/" + m.ref.Name + "/resolve/" + commit + "/" + escapePath(f.Path)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, first, err := c.get(ctx, u, have)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if have > 0 { // the server ignored Range: take it all
			m.done.Add(-have)
			if err := fh.Truncate(0); err != nil {
				return diskErr(err)
			}
			h.reset()
			have = 0
		}
	case http.StatusPartialContent:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(have, 10)+"-") {
			return fmt.Errorf("%s of %s: the server answered range %q for bytes %d-", f.Path, m.ref.Short(), resp.Header.Get("Content-Range"), have)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		_ = fh.Truncate(0)
		m.done.Add(-have)
		return fmt.Errorf("%s of %s: the server refused to resume at byte %d; downloading it again", f.Path, m.ref.Short(), have)
	default:
		return c.statusErr(m.ref, resp)
	}
	if rc := first.Get("X-Repo-Commit"); rc != "" && rc != commit {
		return fmt.Errorf("%s of %s: the Hub answered commit %s, the revision listing %s", f.Path, m.ref.Short(), rc, commit)
	}
	etag := first.Get("X-Linked-Etag")
	if etag == "" {
		etag = first.Get("ETag")
	}
	if etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`); (sha256RE.MatchString(etag) || commitRE.MatchString(etag)) && etag != f.Blob {
		return fmt.Errorf("%s of %s: the Hub's ETag %s is not the listed hash %s", f.Path, m.ref.Short(), etag, f.Blob)
	}
	if _, err := fh.Seek(have, io.SeekStart); err != nil {
		return diskErr(err)
	}
	// A transfer that stalls is abandoned (and resumed next attempt).
	var stalled atomic.Bool
	stall := time.AfterFunc(c.cfg.StallTimeout, func() { stalled.Store(true); cancel() })
	defer stall.Stop()
	buf := make([]byte, copyBuf)
	body := io.LimitReader(resp.Body, f.Size-have)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			stall.Reset(c.cfg.StallTimeout)
			if _, err := fh.Write(buf[:n]); err != nil {
				return diskErr(err)
			}
			h.Write(buf[:n])
			m.done.Add(int64(n))
			have += int64(n)
			if c.lim != nil {
				if err := c.lim.WaitN(ctx, n); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if stalled.Load() {
				return fmt.Errorf("%s of %s: the transfer stalled at byte %d of %d; it resumes from there", f.Path, m.ref.Short(), have, f.Size)
			}
			return fmt.Errorf("%s of %s: interrupted at byte %d of %d (%w); it resumes from there", f.Path, m.ref.Short(), have, f.Size, rerr)
		}
	}
	if have != f.Size {
		return fmt.Errorf("%s of %s: the transfer ended at byte %d of %d; it resumes from there", f.Path, m.ref.Short(), have, f.Size)
	}
	return nil
}

// get GETs u (from byte from when > 0), following redirects by hand: the
// token goes only to the Hub's own host, and the first answer's headers
// (X-Repo-Commit, X-Linked-Etag) are returned beside the last answer.
func (c *Cache) get(ctx context.Context, u string, from int64) (*http.Response, http.Header, error) {
	hub, err := url.Parse(c.cfg.Endpoint)
	if err != nil {
		return nil, nil, fmt.Errorf("the Hub's address %q: %w", c.cfg.Endpoint, err)
	}
	var first http.Header
	for range maxRedirects + 1 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("User-Agent", "berth-model-cache")
		if c.cfg.Token != nil && req.URL.Host == hub.Host {
			if tok := c.cfg.Token(); tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		if from > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(from, 10)+"-")
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return nil, nil, fmt.Errorf("the Hub at %s: %w", c.cfg.Endpoint, err)
		}
		if first == nil {
			first = resp.Header.Clone()
		}
		switch resp.StatusCode {
		case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
			loc, err := resp.Location()
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if err != nil {
				return nil, nil, fmt.Errorf("a redirect from %s: %w", u, err)
			}
			u = loc.String()
			continue
		}
		return resp, first, nil
	}
	return nil, nil, fmt.Errorf("more than %d redirects from the Hub", maxRedirects)
}

// statusErr says why the Hub refused, with what a user can do about it.
func (c *Cache) statusErr(ref Ref, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var msg struct {
		Error string `json:"error"`
	}
	detail := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &msg) == nil && msg.Error != "" {
		detail = msg.Error
	}
	if len(detail) > 300 {
		detail = detail[:300] + "…"
	}
	code := resp.Header.Get("X-Error-Code")
	hasToken := c.cfg.Token != nil && c.cfg.Token() != ""
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if !hasToken {
			return fmt.Errorf("the Hub refused %s (HTTP %d %s): the model is gated or private and Berth has no Hugging Face token (store one: berth hf-token set, or PUT /v2/account/huggingface-token)", ref.Short(), resp.StatusCode, code)
		}
		return fmt.Errorf("the Hub refused %s (HTTP %d %s) with Berth's Hugging Face token: the token has no access to it (%s)", ref.Short(), resp.StatusCode, code, detail)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("the Hub has no %s (HTTP 404 %s): %s", ref.Short(), code, detail)
	}
	return fmt.Errorf("the Hub answered HTTP %d for %s: %s", resp.StatusCode, ref.Short(), detail)
}

// snapshot makes snapshots/COMMIT: symlinks to the blobs, built beside it
// and renamed in, so it appears complete or not at all.
func (c *Cache) snapshot(repo, commit string, files []hubFile) error {
	snaps := filepath.Join(repo, "snapshots")
	dst := filepath.Join(snaps, commit)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(snaps, 0o755); err != nil {
		return diskErr(err)
	}
	if err := writeTree(repo, commit, files); err != nil {
		return diskErr(err)
	}
	tmp := filepath.Join(snaps, "."+commit+"-"+randHex())
	defer os.RemoveAll(tmp)
	for _, f := range files {
		p := filepath.Join(tmp, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return diskErr(err)
		}
		// Relative, as huggingface_hub makes them: ../../blobs/X from
		// snapshots/COMMIT/, one more ../ per folder of the path.
		up := strings.Repeat("../", 2+strings.Count(f.Path, "/"))
		if err := os.Symlink(up+"blobs/"+f.Blob, p); err != nil {
			return diskErr(err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		if _, serr := os.Stat(dst); serr == nil {
			return nil
		}
		return diskErr(err)
	}
	return nil
}

// writeTree writes trees/COMMIT.json, the listing huggingface_hub (1.28)
// keeps beside a snapshot: offline, snapshot_download of a commit reads
// it to know the snapshot's files.
func writeTree(repo, commit string, files []hubFile) error {
	type entry struct {
		Size      int64  `json:"size"`
		BlobID    string `json:"blob_id"`
		LFSSha256 string `json:"lfs_sha256,omitempty"`
		LFSSize   *int64 `json:"lfs_size,omitempty"`
	}
	tree := struct {
		FormatVersion int              `json:"format_version"`
		Files         map[string]entry `json:"files"`
	}{FormatVersion: 1, Files: map[string]entry{}}
	for _, f := range files {
		e := entry{Size: f.Size, BlobID: f.OID}
		if f.LFS {
			size := f.Size
			e.LFSSha256, e.LFSSize = f.Blob, &size
		}
		tree.Files[f.Path] = e
	}
	b, err := json.MarshalIndent(tree, "", " ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(repo, "trees", commit+".json"), b)
}

func writeAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp-" + randHex()
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, p)
}

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return path.Join(parts...)
}

// diskErr names a full disk as such.
func diskErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("disk full in the model cache: %w", err)
	}
	return fmt.Errorf("model cache: %w", err)
}

// hasher computes a blob's name: sha256 for large (LFS) files, git's blob
// sha1 for the others.
type hasher struct {
	f    hubFile
	name string
	h    hash.Hash
}

func newHasher(f hubFile) *hasher {
	h := &hasher{f: f}
	h.reset()
	return h
}

func (h *hasher) reset() {
	if h.f.LFS {
		h.name, h.h = "sha256", sha256.New()
		return
	}
	h.name, h.h = "git blob sha1", sha1.New()
	fmt.Fprintf(h.h, "blob %d\x00", h.f.Size)
}

func (h *hasher) Write(p []byte) (int, error) { return h.h.Write(p) }
func (h *hasher) sum() string                 { return hex.EncodeToString(h.h.Sum(nil)) }
