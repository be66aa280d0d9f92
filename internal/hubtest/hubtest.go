// Package hubtest is a local stand-in for the Hugging Face Hub, written for
// the tests: the revision API (`GET /api/models/ORG/NAME/revision/REV`, with
// `?blobs=true` sizes and hashes), file resolution
// (`GET|HEAD /ORG/NAME/resolve/REV/PATH`: small files answered directly with
// their git blob id as ETag, large "LFS" files redirected to a content path
// with `X-Linked-Etag` = their sha256, as the Hub does to its CDN), `Range`
// on the content path, and gated repositories answering 401 without the
// token. Faults are set per file: cut the connection after N bytes, flip a
// byte, or hold the transfer after N bytes until released. Large made-up
// files (Generate) are produced on the fly, never held in memory; BytesSent
// counts the file bytes served.
package hubtest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// File is one file of a repository.
type File struct {
	Path string
	Data []byte
	// LFS: served as a large file (redirect to the content path, sha256
	// ETag); otherwise as a git blob (direct answer, git sha1 ETag).
	LFS bool
	// Gen, when set, is the file's content instead of Data: a large
	// made-up file, always served as LFS.
	Gen *Generated
}

func (f File) size() int64 {
	if f.Gen != nil {
		return f.Gen.size
	}
	return int64(len(f.Data))
}

func (f File) sha256() string {
	if f.Gen != nil {
		return f.Gen.sha256
	}
	return Sha256(f.Data)
}

// gitID is the file's git blob id; a generated file's is its LFS
// pointer's, as on the Hub (hashing a large file twice is not worth it).
func (f File) gitID() string {
	if f.Gen != nil {
		return GitBlobID([]byte(fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", f.Gen.sha256, f.Gen.size)))
	}
	return GitBlobID(f.Data)
}

func (f File) lfs() bool { return f.LFS || f.Gen != nil }

func (f File) content() content { return content{data: f.Data, gen: f.Gen} }

// content is a file's bytes: in memory, or generated.
type content struct {
	data []byte
	gen  *Generated
}

func (c content) size() int64 {
	if c.gen != nil {
		return c.gen.size
	}
	return int64(len(c.data))
}

func (c content) readerAt() io.ReaderAt {
	if c.gen != nil {
		return c.gen
	}
	return bytesReaderAt(c.data)
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Generated is a made-up file of pseudo-random bytes (the AES-CTR key
// stream of a key derived from a seed): the same bytes for the same seed
// in every run, readable at any offset, so a gigabyte is served without
// being held in memory. Its sha256 is computed once per process.
type Generated struct {
	size   int64
	block  cipher.Block
	sha256 string
}

var (
	genMu   sync.Mutex
	genMemo = map[[2]int64]*Generated{}
)

// Generate returns the made-up file of size bytes for seed (hashing it the
// first time: ≈ 1 s a GB).
func Generate(seed uint64, size int64) *Generated {
	genMu.Lock()
	defer genMu.Unlock()
	k := [2]int64{int64(seed), size}
	if g := genMemo[k]; g != nil {
		return g
	}
	key := sha256.Sum256([]byte(fmt.Sprintf("hubtest generated %d", seed)))
	block, err := aes.NewCipher(key[:16])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	g := &Generated{size: size, block: block}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(g, 0, size)); err != nil {
		panic(err)
	}
	g.sha256 = hex.EncodeToString(h.Sum(nil))
	genMemo[k] = g
	return g
}

// Size is the file's length.
func (g *Generated) Size() int64 { return g.size }

// Sha256 is the file's sha256 in hex.
func (g *Generated) Sha256() string { return g.sha256 }

// ReadAt reads the bytes at off (io.ReaderAt; safe for concurrent use).
func (g *Generated) ReadAt(p []byte, off int64) (int, error) {
	if off >= g.size {
		return 0, io.EOF
	}
	var eof error
	if rest := g.size - off; int64(len(p)) > rest {
		p, eof = p[:rest], io.EOF
	}
	var iv [aes.BlockSize]byte
	for i, ctr := aes.BlockSize-1, uint64(off/aes.BlockSize); i >= aes.BlockSize-8; i-- {
		iv[i], ctr = byte(ctr), ctr>>8
	}
	stream := cipher.NewCTR(g.block, iv[:])
	if skip := int(off % aes.BlockSize); skip > 0 {
		var discard [aes.BlockSize]byte
		stream.XORKeyStream(discard[:skip], discard[:skip])
	}
	clear(p)
	stream.XORKeyStream(p, p)
	return len(p), eof
}

// Repo is one model repository at one commit.
type Repo struct {
	ID    string   // ORG/NAME
	Files []File   // the commit's files
	Refs  []string // branch and tag names resolving to the commit; "main" always does
	// Gated: the API and resolve answer 401 without the server's token.
	Gated bool
	// Commit is set by Add (40 hex digits derived from the content).
	Commit string
}

// Request is one request the server answered, for tests to assert on.
type Request struct {
	Method, Path, Range, Authorization string
}

type fault struct {
	cutAfter  int64 // > 0: close the connection after this many body bytes (once)
	corrupt   bool  // flip the first body byte
	holdAfter int64 // > 0: stop after this many bytes until release is closed
	release   chan struct{}
}

// Server is the stand-in Hub.
type Server struct {
	*httptest.Server
	Token string // the token gated repositories want (Bearer)

	mu       sync.Mutex
	repos    map[string]*Repo         // by ID
	blobs    map[string]content       // sha256 → data (the content store)
	faults   map[string]*fault        // sha256 → fault
	requests []Request                // bounded by the test's own traffic
	held     map[string]chan struct{} // sha256 → closed when a transfer reached its hold
	sent     atomic.Int64             // file bytes written to clients
}

// New starts a Server; it is closed when the test ends.
func New(t testing.TB) *Server {
	s := &Server{Token: "hf_test_token", repos: map[string]*Repo{}, blobs: map[string]content{},
		faults: map[string]*fault{}, held: map[string]chan struct{}{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// ListenAlso serves the Hub on another address too (host:0 picks a port),
// e.g. Docker's bridge gateway for containers to reach; it returns the
// address listened on. Redirects name the host a request came to, so a
// client on either address stays on it.
func (s *Server) ListenAlso(t testing.TB, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("hubtest: listen on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve)}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// BytesSent is how many file bytes (resolve and content answers' bodies)
// the server has written so far.
func (s *Server) BytesSent() int64 { return s.sent.Load() }

// Add publishes a repository and returns it with its Commit set.
func (s *Server) Add(r Repo) *Repo {
	h := sha1.New()
	fmt.Fprintf(h, "%s\x00", r.ID)
	for _, f := range r.Files {
		fmt.Fprintf(h, "%s\x00%s\x00", f.Path, f.sha256())
	}
	r.Commit = hex.EncodeToString(h.Sum(nil))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range r.Files {
		s.blobs[f.sha256()] = f.content()
	}
	cp := r
	s.repos[r.ID] = &cp
	return &cp
}

// Sha256 is data's sha256 in hex: a large file's ETag and blob name.
func Sha256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// GitBlobID is git's sha1 of a blob: a small file's ETag and blob name.
func GitBlobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// CutOnce makes the next transfer of data close the connection after n bytes.
func (s *Server) CutOnce(data []byte, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultLocked(data).cutAfter = n
}

// Corrupt makes every transfer of data carry a flipped first byte (on) or
// the true bytes (off).
func (s *Server) Corrupt(data []byte, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faultLocked(data).corrupt = on
}

// Hold makes transfers of data stop after n bytes until the returned
// release function is called; reached is closed once a transfer is held.
func (s *Server) Hold(data []byte, n int64) (reached <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faultLocked(data)
	f.holdAfter = n
	f.release = make(chan struct{})
	r := make(chan struct{})
	s.held[Sha256(data)] = r
	var once sync.Once
	rel := f.release
	return r, func() { once.Do(func() { close(rel) }) }
}

func (s *Server) faultLocked(data []byte) *fault {
	k := Sha256(data)
	if s.faults[k] == nil {
		s.faults[k] = &fault{}
	}
	return s.faults[k]
}

// Requests returns the requests answered so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, Request{r.Method, r.URL.EscapedPath(), r.Header.Get("Range"), r.Header.Get("Authorization")})
	s.mu.Unlock()
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/api/models/") && strings.Contains(p, "/tree/"):
		s.tree(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/api/models/"):
		s.revision(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/cdn/"):
		s.content(w, r, strings.TrimPrefix(p, "/cdn/"))
	case strings.Contains(p, "/resolve/"):
		s.resolve(w, r, strings.TrimPrefix(p, "/"))
	default:
		hubError(w, http.StatusNotFound, "RepoNotFound", "not found")
	}
}

func hubError(w http.ResponseWriter, code int, xcode, msg string) {
	w.Header().Set("X-Error-Code", xcode)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// repoAt finds ORG/NAME at the start of rest and the revision after sep.
func (s *Server) repoAt(w http.ResponseWriter, r *http.Request, rest, sep string) (repo *Repo, after string, ok bool) {
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 3 || !strings.HasPrefix("/"+parts[2], sep) {
		hubError(w, http.StatusNotFound, "RepoNotFound", "no such route")
		return nil, "", false
	}
	s.mu.Lock()
	repo = s.repos[parts[0]+"/"+parts[1]]
	s.mu.Unlock()
	if repo == nil {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	if repo.Gated && r.Header.Get("Authorization") != "Bearer "+s.Token {
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+repo.ID+" is restricted. You must have access to it and be authenticated to access it.")
		return nil, "", false
	}
	return repo, strings.TrimPrefix("/"+parts[2], sep), true
}

func (s *Server) commitOf(repo *Repo, rev string) (string, bool) {
	if rev == repo.Commit || rev == "main" {
		return repo.Commit, true
	}
	for _, n := range repo.Refs {
		if n == rev {
			return repo.Commit, true
		}
	}
	return "", false
}

type lfsInfo struct {
	Sha256      string `json:"sha256"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

type sibling struct {
	RFilename string   `json:"rfilename"`
	Size      *int64   `json:"size,omitempty"`
	BlobID    string   `json:"blobId,omitempty"`
	LFS       *lfsInfo `json:"lfs,omitempty"`
}

func (s *Server) revision(w http.ResponseWriter, r *http.Request, rest string) {
	repo, after, ok := s.repoAt(w, r, rest, "/revision/")
	if !ok {
		return
	}
	rev, err := url.PathUnescape(after)
	if err != nil {
		hubError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	commit, ok := s.commitOf(repo, rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	blobs := r.URL.Query().Get("blobs") == "true"
	sibs := []sibling{}
	for _, f := range repo.Files {
		sb := sibling{RFilename: f.Path}
		if blobs {
			n := f.size()
			sb.Size = &n
			sb.BlobID = f.gitID()
			if f.lfs() {
				sb.LFS = &lfsInfo{Sha256: f.sha256(), Size: n, PointerSize: 134}
			}
		}
		sibs = append(sibs, sb)
	}
	sort.Slice(sibs, func(i, j int) bool { return sibs[i].RFilename < sibs[j].RFilename })
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"_id": repo.Commit[:24], "id": repo.ID, "modelId": repo.ID,
		"sha": commit, "private": false, "gated": repo.Gated, "siblings": sibs})
}

// tree answers the recursive listing huggingface_hub's snapshot_download
// reads (`/api/models/ORG/NAME/tree/REV?recursive=true`), one page.
func (s *Server) tree(w http.ResponseWriter, r *http.Request, rest string) {
	repo, after, ok := s.repoAt(w, r, rest, "/tree/")
	if !ok {
		return
	}
	rev, err := url.PathUnescape(after)
	if err != nil {
		hubError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	if _, ok := s.commitOf(repo, rev); !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	type lfs struct {
		Oid         string `json:"oid"`
		Size        int64  `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type entry struct {
		Type string `json:"type"`
		Oid  string `json:"oid"`
		Size int64  `json:"size"`
		Path string `json:"path"`
		LFS  *lfs   `json:"lfs,omitempty"`
	}
	out := []entry{}
	for _, f := range repo.Files {
		e := entry{Type: "file", Oid: f.gitID(), Size: f.size(), Path: f.Path}
		if f.lfs() {
			e.LFS = &lfs{Oid: f.sha256(), Size: f.size(), PointerSize: 134}
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request, rest string) {
	repo, after, ok := s.repoAt(w, r, rest, "/resolve/")
	if !ok {
		return
	}
	revEsc, pathEsc, _ := strings.Cut(after, "/")
	rev, err1 := url.PathUnescape(revEsc)
	path, err2 := url.PathUnescape(pathEsc)
	if err1 != nil || err2 != nil {
		hubError(w, http.StatusBadRequest, "BadRequest", "bad path")
		return
	}
	commit, ok := s.commitOf(repo, rev)
	if !ok {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	var file *File
	for i := range repo.Files {
		if repo.Files[i].Path == path {
			file = &repo.Files[i]
		}
	}
	if file == nil {
		hubError(w, http.StatusNotFound, "EntryNotFound", path+" does not exist on \""+rev+"\"")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if file.lfs() {
		sum := file.sha256()
		w.Header().Set("X-Linked-Etag", `"`+sum+`"`)
		w.Header().Set("X-Linked-Size", strconv.FormatInt(file.size(), 10))
		w.Header().Set("ETag", `W/"pointer-`+file.gitID()[:12]+`"`)
		// Absolute, as the Hub's redirects to its CDN are, on the host
		// the request came to.
		http.Redirect(w, r, "http://"+r.Host+"/cdn/"+sum+"?expires=never", http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+file.gitID()+`"`)
	fc := s.takeFault(file.sha256())
	s.send(w, r, file.sha256(), file.content(), &fc)
}

// takeFault copies the fault of the file with this sha256 (a cut happens once).
func (s *Server) takeFault(sum string) fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults[sum]
	if f == nil {
		return fault{}
	}
	fc := *f
	f.cutAfter = 0
	return fc
}

func (s *Server) content(w http.ResponseWriter, r *http.Request, sum string) {
	s.mu.Lock()
	c, ok := s.blobs[sum]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", `"cdn-`+sum[:16]+`"`)
	fc := s.takeFault(sum)
	s.send(w, r, sum, c, &fc)
}

// send answers c with Range support and the file's faults.
func (s *Server) send(w http.ResponseWriter, r *http.Request, key string, c content, f *fault) {
	var src io.ReaderAt = c.readerAt()
	if f != nil && f.corrupt {
		src = flipFirst{src}
	}
	size := c.size()
	w.Header().Set("Accept-Ranges", "bytes")
	start := int64(0)
	if rg := r.Header.Get("Range"); rg != "" {
		spec, ok := strings.CutPrefix(rg, "bytes=")
		from, _, _ := strings.Cut(spec, "-")
		n, err := strconv.ParseInt(from, 10, 64)
		if !ok || err != nil || n < 0 {
			http.Error(w, "bad range", http.StatusBadRequest)
			return
		}
		if n >= size {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = n
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, size-1, size))
	}
	body := io.NewSectionReader(src, start, size-start)
	w.Header().Set("Content-Length", strconv.FormatInt(size-start, 10))
	if start > 0 {
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if r.Method == http.MethodHead {
		return
	}
	out := countingWriter{w, &s.sent}
	buf := make([]byte, 256<<10)
	if f != nil && f.cutAfter > 0 && f.cutAfter < body.Size() {
		_, _ = io.CopyBuffer(out, io.LimitReader(body, f.cutAfter), buf)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection is closed mid-body
	}
	if f != nil && f.holdAfter > 0 && f.release != nil && start < f.holdAfter && f.holdAfter < size {
		_, _ = io.CopyBuffer(out, io.LimitReader(body, f.holdAfter-start), buf)
		w.(http.Flusher).Flush()
		s.mu.Lock()
		if ch := s.held[key]; ch != nil {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		s.mu.Unlock()
		select {
		case <-f.release:
		case <-r.Context().Done():
			return
		}
	}
	_, _ = io.CopyBuffer(out, body, buf)
}

// flipFirst reads its ReaderAt with the first byte flipped (a corrupt copy).
type flipFirst struct{ io.ReaderAt }

func (f flipFirst) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.ReaderAt.ReadAt(p, off)
	if off == 0 && n > 0 {
		p[0] ^= 0xff
	}
	return n, err
}

// countingWriter adds what it writes to n (and hides the ResponseWriter's
// ReadFrom, so CopyBuffer's buffer is used).
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

// Counted before the write: a client that has the bytes sees them counted.
func (c countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	n, err := c.w.Write(p)
	c.n.Add(int64(n - len(p)))
	return n, err
}
