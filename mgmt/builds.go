package mgmt

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"berth/queue"
	"berth/store"
)

// Builds: an endpoint's image built from a source (an uploaded context
// tar, or a git repository: gitsource.go). The rules here are the record's: its input, its name, its states,
// and what a completed build changes (the endpoint's template image, a
// release with source GIT_BUILD and the build's id). Running the build is
// package builder's.

// ReleaseGitBuild is v2's release source of a build's release.
const ReleaseGitBuild = "GIT_BUILD"

// Build limits.
var (
	LimitBuildArgs = Limit{"buildArgs", 0, 64, "entries", ""}
	// LimitBuildsKept is how many builds an endpoint keeps; older finished
	// ones (and their logs) go when a new one is made.
	LimitBuildsKept = 50
)

// BuildInput is a new build of an endpoint.
type BuildInput struct {
	EndpointID string
	Dockerfile string // relative to the context root; "" is "Dockerfile"
	Target     string
	BuildArgs  map[string]string
	// SecretArgs are build args whose values are secret: passed to the
	// build, never stored, answered or logged (the record keeps their
	// names and an HMAC).
	SecretArgs map[string]string
	// ContextDigest is the sha256 (hex) of the context tar as received;
	// ContextBytes its size (an upload's; a git build's come once cloned:
	// ResolveGitBuild).
	ContextDigest string
	ContextBytes  int64
	// Git is a git build's source (nil: an uploaded context).
	Git *GitSource
	// Given names the endpoint fields the command gave (berth deploy's
	// flags): hub.json's config does not override them
	// (ApplyHubDefaults).
	Given []string
}

var (
	// fieldNameRe is an endpoint field's name (given).
	fieldNameRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	// hubFields are the endpoint fields hub.json's config sets.
	hubFields  = []string{"computeType", "type", "containerDiskInGb", "cpuFlavorIds", "gpuCount", "gpuTypeIds", "allowedCudaVersions", "env"}
	buildArgRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	targetRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

// CheckBuildInput checks a build's options (no store access): the
// Dockerfile path stays inside the context, the target is a stage name,
// build args are KEY=value with a variable name. It returns the cleaned
// Dockerfile path.
func CheckBuildInput(in BuildInput) (string, error) {
	df, err := CleanContextPath("dockerfile", in.Dockerfile)
	if err != nil {
		return "", err
	}
	if df == "." {
		df = "Dockerfile"
	}
	if in.Target != "" && (len(in.Target) > 128 || !targetRe.MatchString(in.Target)) {
		return "", invalid("target", "target %s is not a build stage name (letters, digits, . _ -)", quote(ShortID(in.Target)))
	}
	if err := LimitBuildArgs.CheckCount("buildArgs", len(in.BuildArgs)+len(in.SecretArgs)); err != nil {
		return "", err
	}
	for k, v := range in.SecretArgs {
		// Never the value in an answer: only its name.
		if len(k) > 128 || !buildArgRe.MatchString(k) {
			return "", invalid("secretBuildArgs", "secretBuildArgs: %s is not a variable name (KEY=VALUE, KEY of letters, digits and _)", quote(ShortID(k)))
		}
		if _, both := in.BuildArgs[k]; both {
			return "", invalid("secretBuildArgs", "secretBuildArgs: %s is given as a build arg too: give it once", k)
		}
		if len(v) > 4096 || CheckText("secretBuildArgs", v, false) != nil {
			return "", invalid("secretBuildArgs", "secretBuildArgs: the value of %s must be one line of printable text of at most 4096 bytes", k)
		}
	}
	for k, v := range in.BuildArgs {
		if len(k) > 128 || !buildArgRe.MatchString(k) {
			return "", invalid("buildArgs", "buildArgs: %s is not a variable name (KEY=VALUE, KEY of letters, digits and _)", quote(ShortID(k)))
		}
		if len(v) > 4096 {
			return "", invalid("buildArgs", "buildArgs: the value of %s is over 4096 bytes", k)
		}
		if err := CheckText("buildArgs", v, false); err != nil {
			return "", err
		}
	}
	if in.Git != nil {
		if _, err := CheckGitSource(*in.Git); err != nil {
			return "", err
		}
	}
	if len(in.Given) > 64 {
		return "", invalid("given", "given: over 64 fields")
	}
	for _, g := range in.Given {
		if !slices.Contains(hubFields, g) {
			if len(g) > 64 || CheckText("given", g, false) != nil || !fieldNameRe.MatchString(g) {
				return "", invalid("given", "given: %s is not an endpoint field name", quote(ShortID(g)))
			}
		}
	}
	return df, nil
}

// CleanContextPath cleans p, a path inside a build context: relative, and
// not leaving the context ("../x" and "/x" are refused). "" is ".".
func CleanContextPath(field, p string) (string, error) {
	if err := CheckText(field, p, false); err != nil {
		return "", err
	}
	if len(p) > 1024 {
		return "", invalid(field, "%s is over 1024 bytes", field)
	}
	p = strings.ReplaceAll(p, `\`, "/")
	if strings.HasPrefix(p, "/") {
		return "", invalid(field, "%s %s must be relative to the context: it leaves the source tree", field, quote(ShortID(p)))
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", invalid(field, "%s %s leaves the source tree", field, quote(ShortID(p)))
	}
	return c, nil
}

// BuildDigest is the digest of what a build makes: the context and every
// option. Two builds with the same digest make the same image.
func BuildDigest(contextDigest, dockerfile, target string, args map[string]string, secretsDigest string) string {
	h := sha256.New()
	fmt.Fprintf(h, "context %s\ndockerfile %s\ntarget %s\n", contextDigest, dockerfile, target)
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "arg %q=%q\n", k, args[k])
	}
	if secretsDigest != "" {
		fmt.Fprintf(h, "secrets %s\n", secretsDigest)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SecretArgsDigest is the HMAC-SHA256, under the install's key, of
// secret build args (names and values): a build's image name changes
// with a secret's value without revealing it. A plain hash would let
// anyone who sees the image name confirm a guess of a short secret
// offline; the key (random, in berth.db's meta bucket) makes that need
// the database file.
func SecretArgsDigest(key []byte, secrets map[string]string) string {
	if len(secrets) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, key)
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		fmt.Fprintf(m, "secret %q=%q\n", k, secrets[k])
	}
	return hex.EncodeToString(m.Sum(nil))
}

const buildSecretKeyName = "build_secret_key"

// buildSecretKey is the install's key of SecretArgsDigest, made (32
// random bytes) on first use.
func buildSecretKey(tx *store.Tx) ([]byte, error) {
	if raw := tx.GetRaw(store.Meta, buildSecretKeyName); raw != nil {
		return hex.DecodeString(string(raw))
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("make the build secrets key: %w", err)
	}
	return k, tx.Apply(store.PutRaw(store.Meta, buildSecretKeyName, []byte(hex.EncodeToString(k))))
}

var imageNameRe = regexp.MustCompile(`[^a-z0-9]+`)

// BuildImageName is the Berth-owned name a build of endpoint name with
// digest is tagged with: berth/<name>:<12 hex of the digest>.
func BuildImageName(endpointName, digest string) string {
	n := strings.Trim(imageNameRe.ReplaceAllString(strings.ToLower(endpointName), "-"), "-")
	if len(n) > 64 {
		n = strings.Trim(n[:64], "-")
	}
	if n == "" {
		n = "endpoint"
	}
	return "berth/" + n + ":" + digest[:12]
}

// CreateBuild stores a PENDING build of an endpoint. Older finished
// builds beyond LimitBuildsKept go with their logs.
func (s *Service) CreateBuild(ctx context.Context, in BuildInput) (store.Build, error) {
	if err := live(ctx); err != nil {
		return store.Build{}, err
	}
	df, err := CheckBuildInput(in)
	if err != nil {
		return store.Build{}, err
	}
	b := store.Build{ID: "build_" + queue.NewID(12), EndpointID: in.EndpointID, Status: store.BuildPending, Given: in.Given,
		Source: store.BuildSourceUpload, Dockerfile: df, Target: in.Target, BuildArgs: in.BuildArgs, ContextBytes: in.ContextBytes, CreatedAt: s.now()}
	if in.Git != nil {
		// The image is named once the clone has made the context
		// (ResolveGitBuild).
		g, _ := CheckGitSource(*in.Git)
		b.Source, b.Git, b.ContextBytes = store.BuildSourceGit, &g, 0
	} else {
		if len(in.ContextDigest) != 64 {
			return store.Build{}, fmt.Errorf("create build: context digest %q is not a sha256", in.ContextDigest)
		}
	}
	if len(in.SecretArgs) > 0 {
		b.SecretBuildArgs = slices.Sorted(maps.Keys(in.SecretArgs))
	}
	err = s.cfg.Store.Update(func(tx *store.Tx) error {
		var e store.Endpoint
		if err := getOr404(tx, store.Endpoints, in.EndpointID, "endpoint", &e); err != nil {
			return err
		}
		if len(in.SecretArgs) > 0 {
			key, err := buildSecretKey(tx)
			if err != nil {
				return err
			}
			b.SecretsDigest = SecretArgsDigest(key, in.SecretArgs)
		}
		if b.Git != nil {
			if err := checkGitCredentialRef(tx, b.Git.CredentialID); err != nil {
				return err
			}
		} else {
			b.SourceDigest = BuildDigest(in.ContextDigest, df, in.Target, in.BuildArgs, b.SecretsDigest)
			b.ImageName = BuildImageName(e.Name, b.SourceDigest)
		}
		old, err := endpointBuilds(tx, e.ID)
		if err != nil {
			return err
		}
		ops := []store.Op{store.Put(store.Builds, b.ID, b)}
		kept := 1
		for _, o := range old { // newest first
			if kept < LimitBuildsKept || !store.BuildDone(o.Status) {
				kept++
				continue
			}
			ops = append(ops, store.Delete(store.Builds, o.ID), store.Delete(store.BuildLogs, o.ID))
		}
		return tx.Apply(ops...)
	})
	if err != nil {
		return store.Build{}, err
	}
	return b, nil
}

// endpointBuilds are endpoint id's builds, newest first.
func endpointBuilds(tx *store.Tx, id string) ([]store.Build, error) {
	bs, err := all[store.Build](tx, store.Builds)
	if err != nil {
		return nil, err
	}
	bs = slices.DeleteFunc(bs, func(b store.Build) bool { return b.EndpointID != id })
	byCreated(bs, func(b store.Build) time.Time { return b.CreatedAt }, func(b store.Build) string { return b.ID })
	slices.Reverse(bs)
	return bs, nil
}

// Builds lists endpoint id's builds, newest first.
func (s *Service) Builds(ctx context.Context, endpointID string) ([]store.Build, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	var out []store.Build
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if tx.GetRaw(store.Endpoints, endpointID) == nil {
			return notFoundID("endpoint", endpointID)
		}
		var err error
		out, err = endpointBuilds(tx, endpointID)
		return err
	})
	return out, err
}

// Build reads one build of an endpoint (404 when it is another's).
func (s *Service) Build(ctx context.Context, endpointID, buildID string) (store.Build, error) {
	if err := live(ctx); err != nil {
		return store.Build{}, err
	}
	var b store.Build
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		return getBuild(tx, endpointID, buildID, &b)
	})
	return b, err
}

func getBuild(tx *store.Tx, endpointID, buildID string, b *store.Build) error {
	if tx.GetRaw(store.Endpoints, endpointID) == nil {
		return notFoundID("endpoint", endpointID)
	}
	if err := getOr404(tx, store.Builds, buildID, "build", b); err != nil {
		return err
	}
	if b.EndpointID != endpointID {
		return notFoundID("build", buildID)
	}
	return nil
}

// BuildLog is a finished build's stored log ("" while it runs: the
// builder holds it).
func (s *Service) BuildLog(ctx context.Context, endpointID, buildID string) (store.Build, []byte, error) {
	if err := live(ctx); err != nil {
		return store.Build{}, nil, err
	}
	var b store.Build
	var log []byte
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		if err := getBuild(tx, endpointID, buildID, &b); err != nil {
			return err
		}
		log = slices.Clone(tx.GetRaw(store.BuildLogs, buildID))
		return nil
	})
	return b, log, err
}

// StartBuild moves a PENDING build to status (BUILDING), stamping its
// start. A build no longer PENDING (cancelled meanwhile) is refused.
func (s *Service) StartBuild(id, status string) (store.Build, error) {
	var b store.Build
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Builds, id, "build", &b); err != nil {
			return err
		}
		if b.Status != store.BuildPending {
			return conflict("build %s is %s, not PENDING", id, b.Status)
		}
		now := s.now()
		b.Status, b.StartedAt = status, &now
		return tx.Apply(store.Put(store.Builds, id, b))
	})
	return b, err
}

// UploadingBuild moves a BUILDING build to UPLOADING: its image is being
// pushed to the build registry. A build already ended is refused.
func (s *Service) UploadingBuild(id string) (store.Build, error) {
	var b store.Build
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Builds, id, "build", &b); err != nil {
			return err
		}
		if b.Status != store.BuildBuilding {
			return conflict("build %s is %s, not BUILDING", id, b.Status)
		}
		b.Status = store.BuildUploading
		return tx.Apply(store.Put(store.Builds, id, b))
	})
	return b, err
}

// TestingBuild moves a BUILDING or UPLOADING build to TESTING: its image
// runs its tests (.runpod/tests.json) on a test worker. A build already
// ended is refused.
func (s *Service) TestingBuild(id string) (store.Build, error) {
	var b store.Build
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Builds, id, "build", &b); err != nil {
			return err
		}
		if b.Status != store.BuildBuilding && b.Status != store.BuildUploading {
			return conflict("build %s is %s, not BUILDING or UPLOADING", id, b.Status)
		}
		b.Status = store.BuildTesting
		return tx.Apply(store.Put(store.Builds, id, b))
	})
	return b, err
}

// HubBuild records on a running build its source's hub.json config,
// which CompleteBuild applies (ApplyHubDefaults).
func (s *Service) HubBuild(id string, h HubConfig) (store.Build, error) {
	var b store.Build
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Builds, id, "build", &b); err != nil {
			return err
		}
		if store.BuildDone(b.Status) {
			return conflict("build %s is already %s", id, b.Status)
		}
		b.Hub = &h
		return tx.Apply(store.Put(store.Builds, id, b))
	})
	return b, err
}

// PushedBuild records where a running build's image was pushed: the
// reference by digest (HOST/PREFIX/name@sha256:…), the digest and the
// registry auth it was pushed with ("" anonymous). CompleteBuild then
// releases that reference instead of the local name.
func (s *Service) PushedBuild(id, ref, digest, authID string) (store.Build, error) {
	if !strings.Contains(ref, "@sha256:") || !strings.HasPrefix(digest, "sha256:") {
		return store.Build{}, fmt.Errorf("pushed build %s: %q is not a reference by digest", id, ref)
	}
	var b store.Build
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Builds, id, "build", &b); err != nil {
			return err
		}
		if store.BuildDone(b.Status) {
			return conflict("build %s is already %s", id, b.Status)
		}
		b.PushedImage, b.ImageDigest, b.RegistryAuthID = ref, digest, authID
		return tx.Apply(store.Put(store.Builds, id, b))
	})
	return b, err
}

// BuildRegistryLogin finds the stored registry auth builds push with
// (berth serve --registry-auth: its name or id) and returns its id and
// login. Unknown, it is a clear error naming it.
func (s *Service) BuildRegistryLogin(ctx context.Context, nameOrID string) (id, username, password string, err error) {
	if err := live(ctx); err != nil {
		return "", "", "", err
	}
	err = s.cfg.Store.View(func(tx *store.Tx) error {
		as, err := all[store.RegistryAuth](tx, store.RegistryAuths)
		if err != nil {
			return err
		}
		for _, a := range as {
			if a.ID == nameOrID || a.Name == nameOrID {
				id, username, password = a.ID, a.Username, a.Password
				return nil
			}
		}
		return notFound("no container registry auth named %q (berth serve --registry-auth): create it with `berth registry create` or POST /v2/containerregistryauth", nameOrID)
	})
	return id, username, password, err
}

// FinishBuild ends a build that did not release: FAILED, CANCELLED or
// TEST_FAILED with errMsg, its log stored. A build already finished is
// left as it is (false).
func (s *Service) FinishBuild(id, status, errMsg string, log []byte) (store.Build, bool, error) {
	if !store.BuildDone(status) || status == store.BuildCompleted {
		return store.Build{}, false, fmt.Errorf("finish build %s: %s is not a failed end", id, status)
	}
	var b store.Build
	done := false
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Builds, id, "build", &b); err != nil {
			return err
		}
		if store.BuildDone(b.Status) {
			return nil
		}
		now := s.now()
		b.Status, b.Error, b.CompletedAt, done = status, ClipMessage(errMsg), &now, true
		return tx.Apply(store.Put(store.Builds, id, b), store.PutRaw(store.BuildLogs, id, log))
	})
	return b, done, err
}

// CompleteBuild ends a build that made its image: COMPLETED, its log
// stored, and the endpoint's template runs the image (the pushed
// reference by digest, with its registry auth, when it was pushed). When the image
// changes, every endpoint using the template gets a new version whose
// release has source GIT_BUILD and this build's id — the same rolling
// update as any template change. An endpoint already running the image
// gets no release.
func (s *Service) CompleteBuild(ctx context.Context, id string, reused bool, log []byte) (store.Build, error) {
	var b store.Build
	var rolled []string
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Builds, id, "build", &b); err != nil {
			return err
		}
		if store.BuildDone(b.Status) {
			return conflict("build %s is already %s", id, b.Status)
		}
		var e store.Endpoint
		if err := getOr404(tx, store.Endpoints, b.EndpointID, "endpoint", &e); err != nil {
			return err
		}
		var t store.Template
		if err := getOr404(tx, store.Templates, e.TemplateID, "template", &t); err != nil {
			return err
		}
		now := s.now()
		b.Status, b.CompletedAt, b.Reused = store.BuildCompleted, &now, reused
		before := t
		if b.Hub != nil {
			// hub.json's defaults, on an endpoint deploy made (its first
			// release), where the command gave none: the one rule.
			applied, err := ApplyHubDefaults(*b.Hub, b.Given, &e, &t)
			if err != nil {
				return fmt.Errorf("%s: %w", HubFile, err)
			}
			if len(applied) > 0 {
				b.HubApplied = applied
				if err := tx.Apply(store.Put(store.Endpoints, e.ID, e)); err != nil {
					return err
				}
			}
		}
		if after := buildTemplate(t, b); after.ImageName != before.ImageName || after.ContainerRegistryAuthID != before.ContainerRegistryAuthID {
			var err error
			rolled, err = s.rollUsers(tx, t.ID, "", store.Release{CreatedAt: now, Diff: templateDiff(before, after), Source: ReleaseGitBuild, BuildID: b.ID})
			if err != nil {
				return err
			}
			if err := tx.Apply(store.Put(store.Templates, t.ID, after)); err != nil {
				return err
			}
			b.ReleaseVersion = e.Version + 1
		}
		ops := []store.Op{store.Put(store.Builds, id, b), store.PutRaw(store.BuildLogs, id, log)}
		// The image is there again: builds that made it before and whose
		// copy was pruned can be rolled back to again.
		bs, err := all[store.Build](tx, store.Builds)
		if err != nil {
			return err
		}
		for _, o := range bs {
			if o.ID != id && o.ImageName == b.ImageName && o.ImagePrunedAt != nil {
				o.ImagePrunedAt = nil
				ops = append(ops, store.Put(store.Builds, o.ID, o))
			}
		}
		return tx.Apply(ops...)
	})
	if err != nil {
		return store.Build{}, err
	}
	for _, ep := range rolled {
		s.changed(ep)
	}
	return b, nil
}

// buildTemplate is template t running build b's image: the pushed
// reference pulls with the registry auth it was pushed with.
func buildTemplate(t store.Template, b store.Build) store.Template {
	t.ImageName = b.RunImage()
	if b.PushedImage != "" {
		t.ContainerRegistryAuthID = b.RegistryAuthID
	}
	return t
}

// FailInterruptedBuilds marks every build a previous run left unfinished
// FAILED, saying so: a build is never left BUILDING across a restart.
// Called once at start-up, before the builder runs.
func (s *Service) FailInterruptedBuilds() (int, error) {
	n := 0
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		bs, err := all[store.Build](tx, store.Builds)
		if err != nil {
			return err
		}
		now := s.now()
		var ops []store.Op
		for _, b := range bs {
			if store.BuildDone(b.Status) {
				continue
			}
			b.Error = fmt.Sprintf("interrupted: Berth restarted while the build was %s; deploy again", b.Status)
			b.Status, b.CompletedAt = store.BuildFailed, &now
			ops = append(ops, store.Put(store.Builds, b.ID, b))
			n++
		}
		return tx.Apply(ops...)
	})
	return n, err
}

// deleteBuilds removes endpoint id's builds and their logs.
func deleteBuilds(tx *store.Tx, id string) ([]store.Op, error) {
	bs, err := endpointBuilds(tx, id)
	var ops []store.Op
	for _, b := range bs {
		ops = append(ops, store.Delete(store.Builds, b.ID), store.Delete(store.BuildLogs, b.ID))
	}
	return ops, err
}

// RollbackEndpoint moves endpoint id back onto the image of an earlier
// release a build made (RunPod's rollback: "an earlier build"): version
// toVersion, or when 0 the newest such release whose image the endpoint
// does not run now. It is a new release (source GIT_BUILD, the buildId of
// the build rolled back to) and rolls the workers as any release does.
// Only the image moves back: settings changed since stay.
func (s *Service) RollbackEndpoint(ctx context.Context, id string, toVersion int) (store.Endpoint, error) {
	if err := live(ctx); err != nil {
		return store.Endpoint{}, err
	}
	if toVersion < 0 {
		return store.Endpoint{}, invalid("version", "version must be a release's version (1 or more), got %d", toVersion)
	}
	var e store.Endpoint
	var rolled []string
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		if err := getOr404(tx, store.Endpoints, id, "endpoint", &e); err != nil {
			return err
		}
		var t store.Template
		if err := getOr404(tx, store.Templates, e.TemplateID, "template", &t); err != nil {
			return err
		}
		rs, err := all[store.Release](tx, store.Releases)
		if err != nil {
			return err
		}
		rs = slices.DeleteFunc(rs, func(r store.Release) bool { return r.EndpointID != id })
		slices.SortFunc(rs, func(a, b store.Release) int { return b.Version - a.Version }) // newest first
		var target *store.Build
		for _, r := range rs {
			if toVersion != 0 && r.Version != toVersion {
				continue
			}
			if r.Source != ReleaseGitBuild || r.BuildID == "" {
				if toVersion != 0 {
					return invalid("version", "release v%d of endpoint %s was not made by a build: only a build's image can be rolled back to", toVersion, id)
				}
				continue
			}
			var b store.Build
			if tx.GetRaw(store.Builds, r.BuildID) == nil {
				if toVersion != 0 {
					return invalid("version", "the build of release v%d (%s) is no longer kept (an endpoint keeps its last %d builds), nor its image: deploy that source again instead", toVersion, r.BuildID, LimitBuildsKept)
				}
				continue
			}
			if err := tx.Get(store.Builds, r.BuildID, &b); err != nil {
				return err
			}
			if toVersion == 0 && b.RunImage() == t.ImageName {
				continue // what runs now
			}
			if b.ImagePrunedAt != nil && b.RunImage() != t.ImageName {
				if toVersion != 0 {
					return invalid("version", "the image of release v%d (%s, build %s) was pruned on %s: only the images of an endpoint's last releases made by builds are kept (berth serve --build-images-kept); deploy that source again instead",
						toVersion, b.ImageName, b.ID, b.ImagePrunedAt.UTC().Format(time.RFC3339))
				}
				continue
			}
			target = &b
			break
		}
		switch {
		case target == nil && toVersion != 0:
			return notFound("endpoint %s has no release v%d", id, toVersion)
		case target == nil:
			return invalid("version", "endpoint %s has no earlier release made by a build to roll back to", id)
		case target.RunImage() == t.ImageName:
			return invalid("version", "endpoint %s already runs the image of release v%d (%s)", id, toVersion, target.RunImage())
		}
		after := buildTemplate(t, *target)
		rolled, err = s.rollUsers(tx, t.ID, "", store.Release{CreatedAt: s.now(), Diff: templateDiff(t, after), Source: ReleaseGitBuild, BuildID: target.ID})
		if err != nil {
			return err
		}
		if err := tx.Apply(store.Put(store.Templates, t.ID, after)); err != nil {
			return err
		}
		return getOr404(tx, store.Endpoints, id, "endpoint", &e)
	})
	if err != nil {
		return store.Endpoint{}, err
	}
	for _, ep := range rolled {
		s.changed(ep)
	}
	return e, nil
}
