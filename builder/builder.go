// Package builder runs image builds: it takes a context upload (bounded,
// checked, kept as a file until its build runs), runs builds through an
// image builder (the Docker daemon) one at a time per endpoint and a few
// at a time in all, the rest PENDING, each bounded in time and in log
// size, and hands every end to the management rules (package mgmt), which
// record it and, for a completed build, release the image.
package builder

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"

	"berth/mgmt"
	"berth/store"
)

// Spec is one image build.
type Spec struct {
	Tag        string
	Dockerfile string
	Target     string
	BuildArgs  map[string]string
	Labels     map[string]string
}

// Images is what the builder needs of the container runtime (the Docker
// backend adapts runtime/docker).
type Images interface {
	ImageExists(ctx context.Context, ref string) (bool, error)
	Build(ctx context.Context, contextTar io.Reader, s Spec, line func(string)) error
	// Push tags the local image local as remote (name:tag in a registry),
	// pushes it with login (nil: anonymous) and returns the digest the
	// registry stored ("sha256:…").
	Push(ctx context.Context, local, remote string, login *Login, line func(string)) (string, error)
}

// RegistryImages builds straight into a registry (BuildKit's image
// exporter pushing): no image is kept on Berth's side, and "the same
// source was built before" means the registry has its tag.
type RegistryImages interface {
	// RegistryDigest is remote's (name:tag) digest in its registry, ""
	// when the registry has no such tag.
	RegistryDigest(ctx context.Context, remote string, login *Login) (string, error)
	// BuildPush builds s and pushes the image as remote with login (nil:
	// anonymous); pushing is called when the upload starts. It returns
	// the digest the registry stored.
	BuildPush(ctx context.Context, contextTar io.Reader, s Spec, remote string, login *Login, line func(string), pushing func()) (string, error)
}

// Login is a registry's username and password.
type Login struct{ Username, Password string }

// Records is what the builder needs of the management rules
// (*mgmt.Service).
type Records interface {
	CreateBuild(ctx context.Context, in mgmt.BuildInput) (store.Build, error)
	Build(ctx context.Context, endpointID, buildID string) (store.Build, error)
	BuildLog(ctx context.Context, endpointID, buildID string) (store.Build, []byte, error)
	StartBuild(id, status string) (store.Build, error)
	FinishBuild(id, status, errMsg string, log []byte) (store.Build, bool, error)
	CompleteBuild(ctx context.Context, id string, reused bool, log []byte) (store.Build, error)
	FailInterruptedBuilds() (int, error)
	ResolveGitBuild(id string, c mgmt.GitCommit, contextDigest string, contextBytes int64) (store.Build, error)
	GitCredential(id string) (store.GitCredential, error)
	UploadingBuild(id string) (store.Build, error)
	TestingBuild(id string) (store.Build, error)
	HubBuild(id string, h mgmt.HubConfig) (store.Build, error)
	PushedBuild(id, ref, digest, authID string) (store.Build, error)
	BuildRegistryLogin(ctx context.Context, nameOrID string) (id, username, password string, err error)
	BuildImagePrune(ctx context.Context, keep int, inUse map[string]bool) ([]mgmt.PruneImage, error)
	MarkBuildImagePruned(ids []string) error
}

// Tester runs a build's tests (.runpod/tests.json) on a test worker of
// its image: a worker of a queue of its own, not one of the endpoint's
// (app: through the runtime's own launch path).
type Tester interface {
	// StartTests starts build b's test worker, made with the tests'
	// config. The worker is removed by the TestRun's Close.
	StartTests(ctx context.Context, b store.Build, c mgmt.TestConfig) (TestRun, error)
}

// TestRun is a started test worker.
type TestRun interface {
	// Run runs one test as a job (its input, its timeout as the job's
	// execution timeout) and returns how the job ended: its status and
	// error. An error is a test that could not run (the worker failed to
	// start, ctx ended).
	Run(ctx context.Context, t mgmt.BuildTest) (status, errMsg string, err error)
	// Close removes the test worker (and its queue's jobs), waiting until
	// its container is gone; it never removes the image.
	Close()
}

// Outbound is the outbound address policy git sources obey (the one
// webhooks obey: *queue.WebhookGuard): CheckURL refuses at submission a
// URL whose host is a forbidden address literal; DialContext connects
// only to allowed addresses, after resolution.
type Outbound interface {
	CheckURL(raw string) error
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Config is a builder's settings; zero values are the defaults.
type Config struct {
	Records Records
	// Images builds; nil (and Direct nil): builds are refused (no image
	// builder).
	Images Images
	// Direct, when set, builds straight into Registry (BuildKit with
	// --registry); Images is then not used.
	Direct RegistryImages
	// NoImages says why Images is nil (the error answered, as it is).
	NoImages error
	// Dir holds the uploaded contexts waiting for their build.
	Dir string
	// MaxContextBytes bounds an upload [256 MiB].
	MaxContextBytes int64
	// StepTimeout bounds the image build step [30 min, RunPod's];
	// TotalTimeout a build from its start to its end [160 min].
	StepTimeout, TotalTimeout time.Duration
	// MaxConcurrent builds run at once [2]; one per endpoint.
	MaxConcurrent int
	// MaxLogBytes caps a build's log [1 MiB]: past it, the first half is
	// kept and the rest is the newest lines.
	MaxLogBytes int
	// MaxPending bounds the builds waiting [64].
	MaxPending int
	// Outbound is the address policy of git sources; nil: git builds are
	// refused.
	Outbound Outbound
	// MaxGitFetchBytes bounds what a clone reads from the network [4 ×
	// MaxContextBytes]; the context made from the checkout is bounded by
	// MaxContextBytes as an upload is.
	MaxGitFetchBytes int64
	// Registry (HOST[/PREFIX]), when set, receives every completed build:
	// the image is pushed as HOST/PREFIX/<name>:<tag> (status UPLOADING,
	// bounded by StepTimeout) and the release runs the pushed reference
	// by digest. "": the release runs the local image.
	Registry string
	// RegistryAuth is the name (or id) of the stored registry auth pushes
	// use, and workers pull with; "": anonymous.
	RegistryAuth string
	// ImagesKept is how many images of its newest releases made by
	// builds an endpoint keeps [mgmt.DefaultBuildImagesKept]; older
	// build images are removed from the daemon (PruneImages) after each
	// release and when the cleaner runs it.
	ImagesKept int
	// Remover removes build images; nil: none is pruned.
	Remover ImageRemover
	// InUseImages lists the images containers use (the runtime's
	// instances), never pruned; nil: none.
	InUseImages func(ctx context.Context) ([]string, error)
	// OnPrune is told every image removal and failure (PruneRemoved,
	// PruneFailed), for metrics.
	OnPrune func(result string)
	// Tester runs the tests of a source holding .runpod/tests.json; nil:
	// such a build fails saying why (NoTester).
	Tester   Tester
	NoTester error
	Logger   *slog.Logger
}

// Defaults.
const (
	DefaultMaxContextBytes = 256 << 20
	DefaultStepTimeout     = 30 * time.Minute
	DefaultTotalTimeout    = 160 * time.Minute
	DefaultMaxConcurrent   = 2
	DefaultMaxLogBytes     = 1 << 20
	DefaultMaxPending      = 64
)

// TooLargeError is an upload over MaxContextBytes (HTTP 413).
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the build context is over the %d MiB limit (berth serve --build-max-context)", e.Limit>>20)
}

// errCancelled is the cause of a cancelled build's context.
var errCancelled = errors.New("cancelled")

// Service runs builds. Safe for concurrent use.
type Service struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	pending []pendingBuild  // oldest first
	running map[string]*run // by build id
	busy    map[string]bool // endpoints with a running build
	stopped bool
	wg      sync.WaitGroup
	// inflight counts the builds holding each image from being pruned
	// (hold); pruneMu serialises prunes and the holds' start.
	inflight map[string]int
	pruneMu  sync.Mutex
}

type pendingBuild struct {
	b       store.Build
	file    string
	secrets map[string]string // secret build args: in memory only
}

// run is a running build: its cancel and its live log.
type run struct {
	b      store.Build
	cancel context.CancelCauseFunc
	log    *logBuffer
	done   chan struct{}
	// secrets are the secret build args' values: passed to the build,
	// scrubbed from its log and error, never stored.
	secrets map[string]string
}

// New returns a builder; Start it before use.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxContextBytes <= 0 {
		cfg.MaxContextBytes = DefaultMaxContextBytes
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.TotalTimeout <= 0 {
		cfg.TotalTimeout = DefaultTotalTimeout
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = DefaultMaxLogBytes
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.MaxGitFetchBytes <= 0 {
		cfg.MaxGitFetchBytes = 4 * cfg.MaxContextBytes
	}
	if cfg.ImagesKept <= 0 {
		cfg.ImagesKept = mgmt.DefaultBuildImagesKept
	}
	return &Service{cfg: cfg, log: cfg.Logger, running: map[string]*run{}, busy: map[string]bool{}, inflight: map[string]int{}}
}

// Start marks the builds a previous run left unfinished FAILED and drops
// their contexts.
func (s *Service) Start() error {
	n, err := s.cfg.Records.FailInterruptedBuilds()
	if err != nil {
		return fmt.Errorf("mark interrupted builds: %w", err)
	}
	if n > 0 {
		s.log.Warn("builds interrupted by the restart marked FAILED", "builds", n)
	}
	if s.cfg.Dir != "" {
		if err := os.RemoveAll(s.cfg.Dir); err != nil {
			return fmt.Errorf("remove leftover build contexts: %w", err)
		}
	}
	return nil
}

// Stop cancels the running builds and waits for them; pending ones stay
// for the next start to mark FAILED (interrupted).
func (s *Service) Stop() {
	s.mu.Lock()
	s.stopped = true
	for _, r := range s.running {
		r.cancel(errStopping)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

var errStopping = errors.New("interrupted: Berth stopped during the build")

// Options are a build's settings besides its context.
type Options struct {
	Dockerfile string
	Target     string
	BuildArgs  map[string]string
	// SecretArgs are build args whose values never reach the record, an
	// answer, the build's log or Berth's log.
	SecretArgs map[string]string
	// Given names the endpoint fields the command gave (hub.json's
	// config does not override them: mgmt.ApplyHubDefaults).
	Given []string
}

// Submit takes a build of endpointID from contextTar (an uncompressed tar
// of the source tree): the options are checked first, then the upload is
// read to a file (at most MaxContextBytes: *TooLargeError), its entries
// checked (none may leave the tree) and the Dockerfile found in it; then
// the build is recorded PENDING and queued.
func (s *Service) Submit(ctx context.Context, endpointID string, o Options, contextTar io.Reader) (store.Build, error) {
	if err := s.canBuild(); err != nil {
		return store.Build{}, err
	}
	in := mgmt.BuildInput{EndpointID: endpointID, Dockerfile: o.Dockerfile, Target: o.Target, BuildArgs: o.BuildArgs, SecretArgs: o.SecretArgs, Given: o.Given}
	df, err := mgmt.CheckBuildInput(in)
	if err != nil {
		return store.Build{}, err
	}
	if err := s.canQueue(); err != nil {
		return store.Build{}, err
	}
	if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return store.Build{}, fmt.Errorf("build context directory: %w", err)
	}
	f, err := os.CreateTemp(s.cfg.Dir, "upload-*.tar")
	if err != nil {
		return store.Build{}, fmt.Errorf("store the build context: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	digest, n, err := s.receive(f, contextTar, df)
	if err != nil {
		return store.Build{}, err
	}
	if err := f.Close(); err != nil {
		return store.Build{}, fmt.Errorf("store the build context: %w", err)
	}
	in.Dockerfile, in.ContextDigest, in.ContextBytes = df, digest, n
	b, err := s.cfg.Records.CreateBuild(ctx, in)
	if err != nil {
		return store.Build{}, err
	}
	file := filepath.Join(s.cfg.Dir, b.ID+".tar")
	if err := os.Rename(f.Name(), file); err != nil {
		_, _, _ = s.cfg.Records.FinishBuild(b.ID, store.BuildFailed, "store the build context: "+err.Error(), nil)
		return store.Build{}, fmt.Errorf("store the build context: %w", err)
	}
	keep = true
	s.mu.Lock()
	s.pending = append(s.pending, pendingBuild{b: b, file: file, secrets: o.SecretArgs})
	s.mu.Unlock()
	s.schedule()
	return b, nil
}

// canBuild refuses builds when there is no image builder.
func (s *Service) canBuild() error {
	if s.cfg.Images == nil && s.cfg.Direct == nil {
		why := s.cfg.NoImages
		if why == nil {
			why = errors.New("no image builder")
		}
		return &mgmt.Error{Kind: mgmt.Unavailable, Msg: why.Error(), Err: why}
	}
	return nil
}

// canQueue refuses a build when MaxPending wait already.
func (s *Service) canQueue() error {
	s.mu.Lock()
	full := len(s.pending) >= s.cfg.MaxPending
	s.mu.Unlock()
	if full {
		return &mgmt.Error{Kind: mgmt.Unavailable, Msg: fmt.Sprintf("%d builds are waiting already: try again later", s.cfg.MaxPending)}
	}
	return nil
}

// SubmitGit takes a build of endpointID from a git source (in.Git, with
// in's Dockerfile, Target and BuildArgs): checked (the URL against the
// outbound policy too), recorded PENDING and queued. The clone runs with
// the build: its commit, message, branch and date, and the image name,
// are recorded once it has made the context. This is the entry point of
// the API's git builds and of push webhooks.
func (s *Service) SubmitGit(ctx context.Context, endpointID string, in mgmt.BuildInput) (store.Build, error) {
	if err := s.canBuild(); err != nil {
		return store.Build{}, err
	}
	if in.Git == nil {
		return store.Build{}, mgmt.InvalidInput("git", "git: a git build needs its source (url, ref)")
	}
	in.EndpointID, in.ContextDigest, in.ContextBytes = endpointID, "", 0
	if _, err := mgmt.CheckBuildInput(in); err != nil {
		return store.Build{}, err
	}
	if err := s.checkOutbound(in.Git.URL); err != nil {
		return store.Build{}, err
	}
	if _, err := s.sourceCredential(*in.Git); err != nil {
		return store.Build{}, err
	}
	if err := s.canQueue(); err != nil {
		return store.Build{}, err
	}
	b, err := s.cfg.Records.CreateBuild(ctx, in)
	if err != nil {
		return store.Build{}, err
	}
	s.mu.Lock()
	s.pending = append(s.pending, pendingBuild{b: b, secrets: in.SecretArgs})
	s.mu.Unlock()
	s.schedule()
	return b, nil
}

// receive copies the upload to w, bounded, hashing it and reading its
// tar headers as it goes: an entry leaving the tree is refused, and the
// Dockerfile must be there.
func (s *Service) receive(w io.Writer, r io.Reader, dockerfile string) (string, int64, error) {
	h := sha256.New()
	lim := &limitReader{r: r, left: s.cfg.MaxContextBytes}
	tr := tar.NewReader(io.TeeReader(lim, io.MultiWriter(w, h)))
	found := false
	entries := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if lim.over {
				return "", 0, &TooLargeError{Limit: s.cfg.MaxContextBytes}
			}
			return "", 0, mgmt.InvalidInput("context", "the build context is not a tar archive: %v", err)
		}
		if entries++; entries > 100000 {
			return "", 0, mgmt.InvalidInput("context", "the build context holds over 100000 entries")
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		if _, err := mgmt.CleanContextPath("context", name); err != nil {
			return "", 0, mgmt.InvalidInput("context", "the build context's entry %q leaves the source tree", mgmt.ShortID(hdr.Name))
		}
		if (hdr.Typeflag == tar.TypeLink) && (path.IsAbs(hdr.Linkname) || strings.HasPrefix(path.Clean(hdr.Linkname), "..")) {
			return "", 0, mgmt.InvalidInput("context", "the build context's hard link %q leaves the source tree", mgmt.ShortID(hdr.Name))
		}
		if path.Clean(name) == dockerfile && hdr.Typeflag == tar.TypeReg {
			found = true
		}
	}
	// What follows the archive's end (padding) is read and counted too.
	if _, err := io.Copy(io.MultiWriter(w, h), lim); err != nil {
		return "", 0, fmt.Errorf("read the build context: %w", err)
	}
	if lim.over {
		return "", 0, &TooLargeError{Limit: s.cfg.MaxContextBytes}
	}
	if !found {
		return "", 0, mgmt.InvalidInput("dockerfile", "dockerfile: %s is not a file of the build context", dockerfile)
	}
	return hex.EncodeToString(h.Sum(nil)), s.cfg.MaxContextBytes - lim.left, nil
}

// limitReader reads at most left bytes and notes when r had more.
type limitReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			l.over = true
			return 0, errors.New("over the limit")
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// schedule starts the oldest pending builds of endpoints with none
// running, up to MaxConcurrent.
func (s *Service) schedule() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	for i := 0; i < len(s.pending) && len(s.running) < s.cfg.MaxConcurrent; {
		p := s.pending[i]
		if s.busy[p.b.EndpointID] {
			i++
			continue
		}
		s.pending = append(s.pending[:i], s.pending[i+1:]...)
		ctx, cancel := context.WithCancelCause(context.Background())
		r := &run{b: p.b, cancel: cancel, log: newLogBuffer(s.cfg.MaxLogBytes), done: make(chan struct{}), secrets: p.secrets}
		r.log.scrub = newScrubber(p.secrets)
		s.running[p.b.ID] = r
		s.busy[p.b.EndpointID] = true
		s.wg.Add(1)
		go s.run(ctx, r, p.file)
	}
}

// run builds r's image and hands the end to the records.
func (s *Service) run(ctx context.Context, r *run, file string) {
	defer s.wg.Done()
	if file != "" {
		defer os.Remove(file)
	}
	defer func() {
		r.log.close()
		s.mu.Lock()
		delete(s.running, r.b.ID)
		delete(s.busy, r.b.EndpointID)
		s.mu.Unlock()
		close(r.done)
		s.schedule()
	}()
	ctx, cancelTotal := context.WithTimeoutCause(ctx, s.cfg.TotalTimeout, fmt.Errorf("the build exceeded its maximum time of %s", s.cfg.TotalTimeout))
	defer cancelTotal()
	fail := func(status, msg string) {
		msg = r.log.scrub.apply(msg)
		b, _, err := s.cfg.Records.FinishBuild(r.b.ID, status, msg, r.log.bytes())
		if err != nil {
			s.log.Error("record a failed build", "build", r.b.ID, "err", err)
			return
		}
		s.log.Info("build ended", "build", b.ID, "endpoint", b.EndpointID, "status", b.Status, "error", b.Error)
	}
	b, err := s.cfg.Records.StartBuild(r.b.ID, store.BuildBuilding)
	if err != nil {
		if mgmt.KindOf(err) != mgmt.Conflict { // cancelled while pending: already ended
			s.log.Error("start a build", "build", r.b.ID, "err", err)
		}
		return
	}
	r.b = b
	if b.Source == store.BuildSourceGit {
		var msg string
		file, b, msg = s.prepareGit(ctx, r)
		if msg != "" {
			if errors.Is(context.Cause(ctx), errCancelled) {
				fail(store.BuildCancelled, "cancelled during the clone")
			} else {
				fail(store.BuildFailed, msg)
			}
			return
		}
		defer os.Remove(file)
		r.b = b
	}
	tests, msg := s.readHubFiles(r, b.ID, file)
	if msg != "" {
		fail(store.BuildFailed, msg)
		return
	}
	r.log.line(fmt.Sprintf("berth: building %s (context %d bytes, dockerfile %s)", b.ImageName, b.ContextBytes, b.Dockerfile))
	defer s.hold(b.ImageName)()
	if s.cfg.Direct != nil {
		s.runDirect(ctx, r, b, file, fail)
		return
	}
	exists, err := s.cfg.Images.ImageExists(ctx, b.ImageName)
	if err != nil {
		fail(store.BuildFailed, "check for the image: "+err.Error())
		return
	}
	if exists {
		r.log.line("berth: the same source was built before: " + b.ImageName + " is reused, nothing is built")
	} else {
		// No labels: the classic builder adds each as a LABEL step after
		// the Dockerfile's, a commit each that no cache can reuse (the
		// step before changed); on a naive-diff storage driver
		// (fuse-overlayfs) a commit walks the whole file system. The
		// image's name (berth/ENDPOINT:DIGEST) and its build record say
		// where it comes from.
		if status, msg := s.buildStep(ctx, r, b, file, s.cfg.Images.Build); status != "" {
			fail(status, msg)
			return
		}
	}
	if err := context.Cause(ctx); err != nil {
		fail(ended(err))
		return
	}
	r.log.line("berth: built " + b.ImageName)
	if s.cfg.Registry != "" {
		var status, msg string
		if b, status, msg = s.push(ctx, r, b); status != "" {
			fail(status, msg)
			return
		}
	}
	if tests != nil {
		if status, msg := s.runTests(ctx, r, b, *tests); status != "" {
			fail(status, msg)
			return
		}
	}
	done, err := s.cfg.Records.CompleteBuild(context.WithoutCancel(ctx), b.ID, exists, r.log.bytes())
	if err != nil {
		fail(store.BuildFailed, "release the image: "+err.Error())
		return
	}
	s.log.Info("build completed", "build", done.ID, "endpoint", done.EndpointID, "image", done.ImageName, "reused", exists, "release", done.ReleaseVersion)
	s.pruneAfterBuild()
}

// push sends b's image to the registry (UPLOADING, bounded by
// StepTimeout) and records the reference by digest. A failure returns the
// status and error to end the build with.
func (s *Service) push(ctx context.Context, r *run, b store.Build) (store.Build, string, string) {
	b, err := s.cfg.Records.UploadingBuild(b.ID)
	if err != nil {
		return b, store.BuildFailed, "record the upload: " + err.Error()
	}
	remote := RegistryName(s.cfg.Registry, b.ImageName)
	authID, login, err := s.registryLogin(ctx)
	if err != nil {
		return b, store.BuildFailed, err.Error()
	}
	r.log.line("berth: pushing " + remote)
	pushCtx, cancel := context.WithTimeoutCause(ctx, s.cfg.StepTimeout,
		fmt.Errorf("the push to %s exceeded its time limit of %s", s.cfg.Registry, s.cfg.StepTimeout))
	defer cancel()
	digest, err := s.cfg.Images.Push(pushCtx, b.ImageName, remote, login, r.log.line)
	if err != nil {
		cause := context.Cause(pushCtx)
		switch {
		case errors.Is(cause, errCancelled):
			return b, store.BuildCancelled, "cancelled during the push to " + s.cfg.Registry
		case cause != nil:
			return b, store.BuildFailed, cause.Error()
		}
		return b, store.BuildFailed, fmt.Sprintf("push to %s failed: %v", s.cfg.Registry, err)
	}
	ref := remote[:strings.LastIndexByte(remote, ':')] + "@" + digest
	if b, err = s.cfg.Records.PushedBuild(b.ID, ref, digest, authID); err != nil {
		return b, store.BuildFailed, "record the push: " + err.Error()
	}
	r.log.line("berth: pushed " + ref)
	return b, "", ""
}

// buildArgs are a build's args with its secret ones.
func buildArgs(args, secrets map[string]string) map[string]string {
	if len(secrets) == 0 {
		return args
	}
	out := make(map[string]string, len(args)+len(secrets))
	maps.Copy(out, args)
	maps.Copy(out, secrets)
	return out
}

// registryLogin is the stored registry auth builds push with: its id and
// login; none configured: "", nil.
func (s *Service) registryLogin(ctx context.Context) (string, *Login, error) {
	if s.cfg.RegistryAuth == "" {
		return "", nil, nil
	}
	id, user, pass, err := s.cfg.Records.BuildRegistryLogin(ctx, s.cfg.RegistryAuth)
	if err != nil {
		return "", nil, fmt.Errorf("push to %s: the registry auth: %w", s.cfg.Registry, err)
	}
	return id, &Login{Username: user, Password: pass}, nil
}

// runDirect builds b into the registry (Direct): a tag the registry has
// already is reused (its digest released, nothing built); otherwise the
// builder pushes as it builds (UPLOADING once the upload starts). The
// release runs the pushed reference by digest, as after a Docker push.
func (s *Service) runDirect(ctx context.Context, r *run, b store.Build, file string, fail func(status, msg string)) {
	remote := RegistryName(s.cfg.Registry, b.ImageName)
	authID, login, err := s.registryLogin(ctx)
	if err != nil {
		fail(store.BuildFailed, err.Error())
		return
	}
	digest, err := s.cfg.Direct.RegistryDigest(ctx, remote, login)
	if err != nil {
		// Only a shortcut: a registry that cannot be asked is built into.
		r.log.line(fmt.Sprintf("berth: could not ask the registry for %s (%v): building", remote, err))
		digest = ""
	}
	reused := digest != ""
	if reused {
		r.log.line("berth: the same source was built before: the registry has " + remote + ", nothing is built")
		if _, err := s.cfg.Records.UploadingBuild(b.ID); err != nil {
			fail(store.BuildFailed, "record the upload: "+err.Error())
			return
		}
	} else {
		if status, msg := s.buildStep(ctx, r, b, file, func(stepCtx context.Context, f io.Reader, spec Spec, line func(string)) error {
			r.log.line("berth: building and pushing " + remote)
			var err error
			digest, err = s.cfg.Direct.BuildPush(stepCtx, f, spec, remote, login, line,
				func() {
					if _, err := s.cfg.Records.UploadingBuild(b.ID); err != nil {
						s.log.Error("record a build's upload", "build", b.ID, "err", err)
					}
				})
			return err
		}); status != "" {
			fail(status, msg)
			return
		}
	}
	if err := context.Cause(ctx); err != nil {
		fail(ended(err))
		return
	}
	ref := remote[:strings.LastIndexByte(remote, ':')] + "@" + digest
	if b, err = s.cfg.Records.PushedBuild(b.ID, ref, digest, authID); err != nil {
		fail(store.BuildFailed, "record the push: "+err.Error())
		return
	}
	r.log.line("berth: pushed " + ref)
	done, err := s.cfg.Records.CompleteBuild(context.WithoutCancel(ctx), b.ID, reused, r.log.bytes())
	if err != nil {
		fail(store.BuildFailed, "release the image: "+err.Error())
		return
	}
	s.log.Info("build completed", "build", done.ID, "endpoint", done.EndpointID, "image", done.PushedImage, "reused", reused, "release", done.ReleaseVersion)
}

// buildStep runs one build of b's context (file) under the step time
// limit, logging and tracking the builder's lines; the Docker and the
// direct (BuildKit) paths differ only in build. A failure is returned as
// the status and message to fail the build with ("" when it built).
func (s *Service) buildStep(ctx context.Context, r *run, b store.Build, file string, build func(stepCtx context.Context, f io.Reader, spec Spec, line func(string)) error) (string, string) {
	f, err := os.Open(file)
	if err != nil {
		return store.BuildFailed, "read the build context: " + err.Error()
	}
	defer f.Close()
	stepCtx, cancelStep := context.WithTimeoutCause(ctx, s.cfg.StepTimeout,
		fmt.Errorf("build exceeded maximum time limit of %d seconds (%s)", int(s.cfg.StepTimeout.Seconds()), s.cfg.StepTimeout))
	defer cancelStep()
	tracker := &stepTracker{}
	err = build(stepCtx, f, Spec{Tag: b.ImageName, Dockerfile: b.Dockerfile, Target: b.Target, BuildArgs: buildArgs(b.BuildArgs, r.secrets)}, func(l string) {
		tracker.see(l)
		r.log.line(l)
	})
	// The cause is read before the deferred cancel sets its own.
	if err != nil {
		return stepFailure(r, context.Cause(stepCtx), err, tracker)
	}
	return "", ""
}

// stepFailure is the status and error of a build step that failed: cause
// is its context's (a cancel, a time limit), err the builder's.
func stepFailure(r *run, cause, err error, tracker *stepTracker) (string, string) {
	switch {
	case errors.Is(cause, errCancelled):
		return store.BuildCancelled, "cancelled during " + tracker.step()
	case cause != nil:
		return store.BuildFailed, fmt.Sprintf("%v, during %s", cause, tracker.step())
	}
	return store.BuildFailed, fmt.Sprintf("%s failed: %v\nlast log lines:\n%s", tracker.step(), err, r.log.lastLines(10))
}

// ended is the status and error of a build whose context ended.
func ended(cause error) (string, string) {
	if errors.Is(cause, errCancelled) {
		return store.BuildCancelled, "cancelled"
	}
	return store.BuildFailed, cause.Error()
}

// RegistryName is the name:tag a build's local image (berth/NAME:TAG)
// is pushed as in registry (HOST[/PREFIX]): HOST/PREFIX/NAME:TAG.
func RegistryName(registry, local string) string {
	return strings.TrimRight(registry, "/") + "/" + strings.TrimPrefix(local, "berth/")
}

// CheckRegistry checks a build registry (HOST[/PREFIX]): the host must be
// explicit (registry.example.com, localhost:5000, 127.0.0.1:5000), the
// prefix path components an image name allows.
func CheckRegistry(registry string) error {
	r := strings.TrimRight(registry, "/")
	if r == "" || strings.ContainsAny(r, "@") {
		return fmt.Errorf("registry %q: want HOST[/PREFIX], e.g. registry.example.com/berth or 127.0.0.1:5000", registry)
	}
	if _, err := reference.ParseNamed(r + "/probe:tag"); err != nil {
		return fmt.Errorf("registry %q: want HOST[/PREFIX] with the registry host first, e.g. registry.example.com/berth or 127.0.0.1:5000: %w", registry, err)
	}
	return nil
}

// Cancel cancels a pending or running build and returns it once ended.
// Cancelling a finished build changes nothing.
func (s *Service) Cancel(ctx context.Context, endpointID, buildID string) (store.Build, error) {
	b, err := s.cfg.Records.Build(ctx, endpointID, buildID)
	if err != nil || store.BuildDone(b.Status) {
		return b, err
	}
	s.mu.Lock()
	for i, p := range s.pending {
		if p.b.ID == buildID {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			os.Remove(p.file)
			break
		}
	}
	r := s.running[buildID]
	s.mu.Unlock()
	if r == nil {
		b, _, err := s.cfg.Records.FinishBuild(buildID, store.BuildCancelled, "cancelled while PENDING", nil)
		if err != nil {
			return store.Build{}, err
		}
		return s.cfg.Records.Build(ctx, endpointID, b.ID)
	}
	r.cancel(errCancelled)
	select {
	case <-r.done:
	case <-ctx.Done():
		return store.Build{}, &mgmt.Error{Kind: mgmt.Unavailable, Msg: "the request ended before the build stopped", Err: ctx.Err()}
	}
	return s.cfg.Records.Build(ctx, endpointID, buildID)
}

// Logs is a build's log: the live log of a running build (follow: until
// it ends), else the stored one.
func (s *Service) Logs(ctx context.Context, endpointID, buildID string, follow bool) (io.ReadCloser, error) {
	if _, err := s.cfg.Records.Build(ctx, endpointID, buildID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	r := s.running[buildID]
	s.mu.Unlock()
	if r != nil {
		return r.log.reader(follow), nil
	}
	_, log, err := s.cfg.Records.BuildLog(ctx, endpointID, buildID)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(strings.NewReader(string(log))), nil
}

var bkStep = regexp.MustCompile(`^#[0-9]+ \[[^\]]*[0-9]+/[0-9]+\] `)

// stepTracker remembers the builder's current step ("Step 3/5 : RUN …").
type stepTracker struct {
	mu   sync.Mutex
	last string
}

// IsStepLine says whether a build log line starts a Dockerfile step: the
// classic builder's "Step 2/5 : RUN …", BuildKit's "#7 [2/5] RUN …".
func IsStepLine(l string) bool {
	return (strings.HasPrefix(l, "Step ") && strings.Contains(l, " : ")) || bkStep.MatchString(l)
}

func (t *stepTracker) see(l string) {
	if IsStepLine(l) {
		t.mu.Lock()
		t.last = l
		t.mu.Unlock()
	}
}

func (t *stepTracker) step() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == "" {
		return "the build (before its first step)"
	}
	s := t.last
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return `"` + s + `"`
}
