package apply

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"berth/builder"
	"berth/builder/srctar"
	"berth/mgmt"
	"berth/store"
	"berth/v1input"
)

// Build is an endpoint's image build, as Compose's build: a context
// directory or a git source, with the builder's options. It replaces the
// template's imageName (the two are mutually exclusive).
type Build struct {
	// Context is the build context's directory, relative to the apply
	// file's folder (or absolute). Any real directory is taken, inside
	// that folder or not; the Dockerfile may not leave it.
	Context    *string           `json:"context,omitempty"`
	Git        *GitBuild         `json:"git,omitempty"`
	Dockerfile string            `json:"dockerfile,omitempty"`
	Target     string            `json:"target,omitempty"`
	BuildArgs  map[string]string `json:"buildArgs,omitempty"`

	// digest is the packed context's sha256 (Apply sets it from
	// Options.Contexts; the plan compares builds by it).
	digest string
}

// GitBuild is a build's git source: Berth clones URL at Ref (a branch, a
// tag or a commit; "" the default branch), ContextPath is the context's
// directory in it, Credential the name or id of a stored git credential.
type GitBuild struct {
	URL         string `json:"url"`
	Ref         string `json:"ref,omitempty"`
	ContextPath string `json:"contextPath,omitempty"`
	Credential  string `json:"credential,omitempty"`
}

// KindBuild is a build action's kind; OpBuild its op when an image is
// built (or reused) and released. An unchanged build is OpUnchanged.
const (
	KindBuild = "build"
	OpBuild   = "build"
)

// placeholderImage is a template's image until its endpoint's first
// build releases one (berth deploy's too): the endpoint is made with
// workersMin 0 until then, so nothing runs it.
const placeholderImage = "berth/pending-first-build:none"

// buildStep is what a build action carries to Execute.
type buildStep struct {
	spec     *Build
	endpoint string // its id, or newRef of the endpoint the plan creates
	credID   string // the git credential's id
	wantMin  int    // workersMin to set once the first build released
}

// checkBuilds: a build has one source, no imageName beside it, a template
// of its own, and options the builder takes (mgmt.CheckBuildInput: the
// Dockerfile stays in the context, build args are variables, no control
// characters).
func (f File) checkBuilds() error {
	image := map[string]int{}
	for i, t := range f.Templates {
		if t.ImageName != nil {
			image[*t.Name] = i
		}
	}
	users := map[string][]string{}
	for _, e := range f.Endpoints {
		users[*e.Template] = append(users[*e.Template], *e.Name)
	}
	for i, e := range f.Endpoints {
		b := e.Build
		if b == nil {
			continue
		}
		at := fmt.Sprintf("endpoints[%d] (%s): build", i, shown(*e.Name))
		switch {
		case b.Context == nil && b.Git == nil:
			return fmt.Errorf("%s: give its source, \"context\" (a directory) or \"git\"", at)
		case b.Context != nil && b.Git != nil:
			return fmt.Errorf("%s: \"context\" and \"git\" are mutually exclusive: give one source", at)
		}
		if j, ok := image[*e.Template]; ok {
			return fmt.Errorf("%s and templates[%d] (%s)'s \"imageName\" are mutually exclusive: the build gives the template its image", at, j, shown(*e.Template))
		}
		if u := users[*e.Template]; len(u) > 1 {
			return fmt.Errorf("%s: template %s is used by endpoints %s: a built endpoint needs a template of its own (a build releases onto every endpoint of its template)", at, shown(*e.Template), shown(strings.Join(u, ", ")))
		}
		in := mgmt.BuildInput{Dockerfile: b.Dockerfile, Target: b.Target, BuildArgs: b.BuildArgs}
		if b.Context != nil {
			if strings.TrimSpace(*b.Context) == "" {
				return fmt.Errorf("%s: context is empty: give a directory (\".\" is the file's folder)", at)
			}
			if err := mgmt.CheckText("context", *b.Context, false); err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
		} else {
			in.Git = &mgmt.GitSource{URL: b.Git.URL, Ref: b.Git.Ref, ContextPath: b.Git.ContextPath}
			if err := mgmt.CheckText("git.credential", b.Git.Credential, false); err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
		}
		if _, err := mgmt.CheckBuildInput(in); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
	}
	return nil
}

// dockerfile is the build's Dockerfile path as the builder records it.
func (b *Build) dockerfile() string {
	df, _ := mgmt.CleanContextPath("dockerfile", b.Dockerfile)
	if df == "." || df == "" {
		df = "Dockerfile"
	}
	return df
}

var commitHex = regexp.MustCompile(`^[0-9a-f]{40}$`)

// built finds the completed build of bs (an endpoint's, newest first)
// whose image the endpoint's template runs (image) and whose source and
// options are b's: then there is nothing to build. A context build is
// matched by its digest (the context's and the options'); a git build
// only when its ref is a commit's full hash (a branch or a tag may have
// moved: only the clone tells).
func built(bs []store.Build, image string, b *Build) (store.Build, bool) {
	df := b.dockerfile()
	var want string
	if b.Context != nil {
		if b.digest == "" {
			return store.Build{}, false
		}
		want = mgmt.BuildDigest(b.digest, df, b.Target, b.BuildArgs, "")
	}
	for _, x := range bs {
		if x.Status != store.BuildCompleted || x.RunImage() != image {
			continue
		}
		if b.Context != nil {
			if x.SourceDigest == want {
				return x, true
			}
			continue
		}
		g, err := mgmt.CheckGitSource(mgmt.GitSource{URL: b.Git.URL, Ref: b.Git.Ref, ContextPath: b.Git.ContextPath})
		if err != nil || x.Git == nil || !commitHex.MatchString(g.Ref) {
			continue
		}
		if x.CommitHash == g.Ref && x.Git.URL == g.URL && x.Git.ContextPath == g.ContextPath && x.Dockerfile == df &&
			x.Target == b.Target && maps.Equal(x.BuildArgs, b.BuildArgs) {
			return x, true
		}
	}
	return store.Build{}, false
}

// detail is a build action's line: what is built and the image it makes.
func (b *Build) detail(endpoint string) string {
	if b.Context != nil {
		s := "context " + *b.Context
		if b.digest != "" {
			s += " → " + mgmt.BuildImageName(endpoint, mgmt.BuildDigest(b.digest, b.dockerfile(), b.Target, b.BuildArgs, ""))
		}
		return s
	}
	ref := b.Git.Ref
	if ref == "" {
		ref = "its default branch"
	}
	return "git " + b.Git.URL + " at " + ref
}

// gitCredentialID finds a stored git credential by id or name.
func gitCredentialID(list []mgmt.GitCredential, nameOrID string) (string, error) {
	var ids []string
	for _, c := range list {
		if c.ID == nameOrID {
			return c.ID, nil
		}
		if c.Name == nameOrID {
			ids = append(ids, c.ID)
		}
	}
	switch len(ids) {
	case 1:
		return ids[0], nil
	case 0:
		return "", fmt.Errorf("git credential %q: no stored git credential has this name or id (berth git-credential list)", nameOrID)
	}
	return "", fmt.Errorf("git credential %q: %d credentials have this name (%s): give its id", nameOrID, len(ids), strings.Join(ids, ", "))
}

// Builder runs builds: *builder.Service, the path berth deploy takes.
type Builder interface {
	Submit(ctx context.Context, endpointID string, o builder.Options, contextTar io.Reader) (store.Build, error)
	SubmitGit(ctx context.Context, endpointID string, in mgmt.BuildInput) (store.Build, error)
	Logs(ctx context.Context, endpointID, buildID string, follow bool) (io.ReadCloser, error)
}

// Context is a build context packed as a tar file (PackDir, or an upload
// spooled by SpoolContext) and its sha256.
type Context struct {
	Path   string
	Digest string
	Size   int64
}

// Remove deletes the tar file.
func (c Context) Remove() { os.Remove(c.Path) }

// ContextDir is a build's context directory: relative to the folder of
// the apply file (fileDir), or absolute.
func ContextDir(fileDir, context string) string {
	if filepath.IsAbs(context) {
		return context
	}
	return filepath.Join(fileDir, context)
}

// PackDir packs dir as berth deploy packs a folder (srctar.WriteDir: the
// same files make the same bytes, .dockerignore honoured, the Dockerfile
// always sent) into a temporary file. dir must be a directory (a symbolic
// link to one is followed).
func PackDir(dir, dockerfile string) (Context, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return Context{}, fmt.Errorf("build context: %w", err)
	}
	if !st.IsDir() {
		return Context{}, fmt.Errorf("build context %s is not a directory", dir)
	}
	df := (&Build{Dockerfile: dockerfile}).dockerfile()
	f, err := os.CreateTemp("", "berth-apply-*.tar")
	if err != nil {
		return Context{}, err
	}
	h := sha256.New()
	_, err = srctar.WriteDir(io.MultiWriter(f, h), dir, df)
	size, _ := f.Seek(0, io.SeekCurrent)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return Context{}, fmt.Errorf("build context %s: %w", dir, err)
	}
	return Context{Path: f.Name(), Digest: hex.EncodeToString(h.Sum(nil)), Size: size}, nil
}

// SpoolContext copies an uploaded context tar to a temporary file, at
// most limit bytes (*builder.TooLargeError past it), hashing it.
func SpoolContext(r io.Reader, limit int64) (Context, error) {
	f, err := os.CreateTemp("", "berth-apply-*.tar")
	if err != nil {
		return Context{}, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = &builder.TooLargeError{Limit: limit}
	}
	if err != nil {
		os.Remove(f.Name())
		return Context{}, err
	}
	return Context{Path: f.Name(), Digest: hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// runBuild submits a build action's build of endpoint id and waits for
// its end: a build that did not complete is an error carrying its own
// (the failing step and its last log lines).
func runBuild(ctx context.Context, m *mgmt.Service, o Options, a Action, id string) (store.Build, error) {
	if o.Builder == nil {
		return store.Build{}, errors.New("this Berth runs no image builder")
	}
	s := a.build
	in := mgmt.BuildInput{Dockerfile: s.spec.Dockerfile, Target: s.spec.Target, BuildArgs: s.spec.BuildArgs}
	var b store.Build
	var err error
	if s.spec.Git != nil {
		in.Git = &mgmt.GitSource{URL: s.spec.Git.URL, Ref: s.spec.Git.Ref, ContextPath: s.spec.Git.ContextPath, CredentialID: s.credID}
		b, err = o.Builder.SubmitGit(ctx, id, in)
	} else {
		c, ok := o.Contexts[a.Name]
		if !ok {
			return store.Build{}, fmt.Errorf("its build context was not given")
		}
		f, ferr := os.Open(c.Path)
		if ferr != nil {
			return store.Build{}, fmt.Errorf("its build context: %w", ferr)
		}
		b, err = o.Builder.Submit(ctx, id, builder.Options{Dockerfile: in.Dockerfile, Target: in.Target, BuildArgs: in.BuildArgs}, f)
		f.Close()
	}
	if err != nil {
		return store.Build{}, err
	}
	if o.Log != nil {
		o.Log(a.Name, fmt.Sprintf("berth: build %s of endpoint %s started", b.ID, id))
	}
	b, err = waitBuild(ctx, m, o, a.Name, id, b.ID)
	if err != nil {
		return b, err
	}
	if b.Status != store.BuildCompleted {
		return b, fmt.Errorf("build %s %s: %s", b.ID, b.Status, b.Error)
	}
	if s.wantMin > 0 {
		if _, err := m.UpdateEndpoint(ctx, id, v1input.EndpointInput{WorkersMin: &s.wantMin}.Mgmt()); err != nil {
			return b, fmt.Errorf("set workersMin %d once built: %w", s.wantMin, err)
		}
	}
	return b, nil
}

// waitBuild follows build bid's log (its steps to o.Log) until it ends.
// A pending build has no live log yet: its record is read again every
// quarter second until it runs.
func waitBuild(ctx context.Context, m *mgmt.Service, o Options, name, id, bid string) (store.Build, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		rc, err := o.Builder.Logs(ctx, id, bid, true)
		if err != nil {
			return store.Build{}, err
		}
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if l := sc.Text(); o.Log != nil && (strings.HasPrefix(l, "Step ") || strings.HasPrefix(l, "berth: ")) {
				o.Log(name, l)
			}
		}
		rc.Close()
		b, err := m.Build(ctx, id, bid)
		if err != nil {
			return b, err
		}
		if store.BuildDone(b.Status) {
			return b, nil
		}
		select {
		case <-ctx.Done():
			return b, fmt.Errorf("build %s is %s: stopped waiting: %w (the build goes on; apply again to see it)", bid, b.Status, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// planBuild is endpoint e's build action, after its own action epAct (e
// runs the template tplID: an id, or newRef of one the plan creates).
// Nothing to build (the template runs the image this source and these
// options made) is an unchanged action. A build of an endpoint that
// exists and keeps its template goes first (first): a failed build then
// leaves everything as it was. A new endpoint is created with workersMin
// 0 and gets the workersMin asked for once its build released.
func planBuild(e Endpoint, epAct *Action, tplID string, st State) (Action, bool, error) {
	s := &buildStep{spec: e.Build, endpoint: epAct.ID}
	act := Action{Kind: KindBuild, Name: *e.Name, Op: OpBuild, Detail: e.Build.detail(*e.Name), build: s}
	if g := e.Build.Git; g != nil && g.Credential != "" {
		id, err := gitCredentialID(st.GitCredentials, g.Credential)
		if err != nil {
			return Action{}, false, fmt.Errorf("endpoint %s: build: %w", shown(*e.Name), err)
		}
		s.credID = id
	}
	if epAct.Op == OpCreate {
		s.endpoint = newRef(KindEndpoint, *e.Name)
		if e.WorkersMin != nil && *e.WorkersMin > 0 {
			s.wantMin = *e.WorkersMin
			epAct.fields["workersMin"] = 0
		}
		return act, false, nil
	}
	if strings.HasPrefix(tplID, "(new ") {
		return act, false, nil
	}
	image := ""
	for _, t := range st.Templates {
		if t.ID == tplID {
			image = t.ImageName
		}
	}
	if b, ok := built(st.Builds[epAct.ID], image, e.Build); ok {
		act.Op, act.ID, act.Detail, act.build = OpUnchanged, b.ID, image, nil
		return act, false, nil
	}
	movesTemplate := slices.ContainsFunc(epAct.Changes, func(c Change) bool { return c.Field == "templateId" })
	return act, !movesTemplate, nil
}
