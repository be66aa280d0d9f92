package v2api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"berth/builder"
	"berth/mgmt"
	"berth/store"
)

// BuildSecretHeader carries a secret build arg (KEY=VALUE, repeated) of
// an uploaded build.
const BuildSecretHeader = "X-Berth-Build-Secret"

// Builds runs image builds (*builder.Service).
type Builds interface {
	Submit(ctx context.Context, endpointID string, o builder.Options, contextTar io.Reader) (store.Build, error)
	SubmitGit(ctx context.Context, endpointID string, in mgmt.BuildInput) (store.Build, error)
	Cancel(ctx context.Context, endpointID, buildID string) (store.Build, error)
	Logs(ctx context.Context, endpointID, buildID string, follow bool) (io.ReadCloser, error)
}

// BuildView is a build as RunPod's newer docs give it, with Berth's own
// fields after (an uploaded source has no commit: those are null).
type BuildView struct {
	ID            string     `json:"id"`
	Status        string     `json:"status"`
	CommitHash    *string    `json:"commitHash"`
	CommitMessage *string    `json:"commitMessage"`
	Branch        *string    `json:"branch"`
	CommitDate    *time.Time `json:"commitDate"`
	ImageName     string     `json:"imageName"`
	StartedAt     *time.Time `json:"startedAt"`
	CompletedAt   *time.Time `json:"completedAt"`
	Error         *string    `json:"error"`

	EndpointID string            `json:"endpointId"`
	Source     string            `json:"source"`
	Git        *GitView          `json:"git"`
	Dockerfile string            `json:"dockerfile"`
	Target     *string           `json:"target"`
	BuildArgs  map[string]string `json:"buildArgs"`
	// SecretBuildArgs names the secret build args; their values are
	// never answered.
	SecretBuildArgs []string  `json:"secretBuildArgs"`
	ContextBytes    int64     `json:"contextBytes"`
	CreatedAt       time.Time `json:"createdAt"`
	Reused          bool      `json:"reused"`
	ReleaseVersion  *int      `json:"releaseVersion"`
	// PushedImage is the image pushed to the build registry, by digest
	// (HOST/PREFIX/name@sha256:…), and ImageDigest its digest: null
	// without a registry (berth serve --registry).
	PushedImage *string `json:"pushedImage"`
	ImageDigest *string `json:"imageDigest"`
	// ImagePrunedAt: when the build's image was removed from the daemon
	// (berth serve --build-images-kept); null while it is kept. A pruned
	// build is not rolled back to.
	ImagePrunedAt *time.Time `json:"imagePrunedAt"`
	// HubApplied: the endpoint fields the source's .runpod/hub.json set
	// at the release (an endpoint deploy made, fields its command did
	// not give); null when none.
	HubApplied []string `json:"hubApplied"`
}

// GitView is a git build's source as asked (the commit built is in
// commitHash, branch...).
type GitView struct {
	URL          string  `json:"url"`
	Ref          *string `json:"ref"`
	ContextPath  *string `json:"contextPath"`
	Commit       *string `json:"commit"`
	CredentialID *string `json:"credentialId"`
}

// BuildList is a page of builds, newest first.
type BuildList struct {
	Builds     []BuildView `json:"builds"`
	Pagination Pagination  `json:"pagination"`
}

// Pagination is RunPod's cursor pagination.
type Pagination struct {
	NextCursor  *string `json:"nextCursor"`
	HasNextPage bool    `json:"hasNextPage"`
}

func viewBuild(b store.Build) BuildView {
	v := BuildView{ID: b.ID, Status: b.Status, ImageName: b.ImageName, StartedAt: b.StartedAt, CompletedAt: b.CompletedAt,
		EndpointID: b.EndpointID, Source: b.Source, Dockerfile: b.Dockerfile, BuildArgs: b.BuildArgs, ContextBytes: b.ContextBytes,
		CreatedAt: b.CreatedAt, Reused: b.Reused, ImagePrunedAt: b.ImagePrunedAt}
	if v.BuildArgs == nil {
		v.BuildArgs = map[string]string{}
	}
	v.SecretBuildArgs = append([]string{}, b.SecretBuildArgs...)
	if b.Error != "" {
		v.Error = ptr(b.Error)
	}
	if b.Target != "" {
		v.Target = ptr(b.Target)
	}
	if b.ReleaseVersion > 0 {
		v.ReleaseVersion = ptr(b.ReleaseVersion)
	}
	v.HubApplied = b.HubApplied
	if b.PushedImage != "" {
		v.PushedImage, v.ImageDigest = ptr(b.PushedImage), ptr(b.ImageDigest)
	}
	if g := b.Git; g != nil {
		v.Git = &GitView{URL: g.URL, Ref: nonEmpty(g.Ref), ContextPath: nonEmpty(g.ContextPath), Commit: nonEmpty(g.Commit), CredentialID: nonEmpty(g.CredentialID)}
	}
	v.CommitHash, v.CommitMessage, v.Branch, v.CommitDate = nonEmpty(b.CommitHash), nonEmpty(b.CommitMessage), nonEmpty(b.Branch), b.CommitDate
	return v
}

const maxBuildsPage = 100

func (a *API) listBuilds(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := maxBuildsPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxBuildsPage {
			a.fail(w, r, bad("limit", "limit must be an integer from 1 to %d, got %q", maxBuildsPage, v))
			return
		}
		limit = n
	}
	bs, err := a.cfg.Mgmt.Builds(r.Context(), pathID(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if c := q.Get("cursor"); c != "" {
		// The cursor is the id of the last build of the previous page.
		i := 0
		for i < len(bs) && bs[i].ID != c {
			i++
		}
		if i == len(bs) {
			a.fail(w, r, bad("cursor", "cursor %q is not a build of this endpoint", mgmt.ShortID(c)))
			return
		}
		bs = bs[i+1:]
	}
	out := BuildList{Builds: []BuildView{}}
	for i, b := range bs {
		if i == limit {
			out.Pagination = Pagination{NextCursor: ptr(bs[i-1].ID), HasNextPage: true}
			break
		}
		out.Builds = append(out.Builds, viewBuild(b))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) getBuild(w http.ResponseWriter, r *http.Request) {
	b, err := a.cfg.Mgmt.Build(r.Context(), pathID(r), mux.Vars(r)["buildId"])
	a.answer(w, r, http.StatusOK, viewBuild(b), err)
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// gitBuildBody is a build from a git repository (Content-Type
// application/json).
type gitBuildBody struct {
	Git *struct {
		URL          string `json:"url"`
		Ref          string `json:"ref"`
		ContextPath  string `json:"contextPath"`
		CredentialID string `json:"credentialId"`
	} `json:"git"`
	Dockerfile string            `json:"dockerfile"`
	Target     string            `json:"target"`
	BuildArgs  map[string]string `json:"buildArgs"`
	// SecretBuildArgs are build args whose values are never stored,
	// answered or logged.
	SecretBuildArgs map[string]string `json:"secretBuildArgs"`
	// Given names the endpoint fields the command gave: hub.json's
	// config does not override them.
	Given []string `json:"given"`
}

// createBuild takes the source as the body: an uncompressed tar
// (Content-Type application/x-tar) with the options as query parameters
// (dockerfile, target and buildArg=KEY=VALUE, repeated), or a git source
// as JSON (gitBuildBody). It answers 202 with the PENDING build.
func (a *API) createBuild(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Builds == nil {
		problem(w, http.StatusServiceUnavailable, "builds need the Docker runtime: this Berth has none")
		return
	}
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	if strings.TrimSpace(ct) == "application/json" {
		a.createGitBuild(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-tar" {
		a.fail(w, r, bad("Content-Type", "the body must be the build context as an uncompressed tar (Content-Type application/x-tar) or a git source as JSON (application/json), got %q", ct))
		return
	}
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "dockerfile", "target", "buildArg", "given":
		default:
			a.fail(w, r, bad(k, "unknown parameter %q: dockerfile, target, buildArg and given are taken", mgmt.ShortID(k)))
			return
		}
	}
	o := builder.Options{Dockerfile: q.Get("dockerfile"), Target: q.Get("target"), BuildArgs: map[string]string{}}
	for _, g := range q["given"] {
		o.Given = append(o.Given, mgmt.SplitList(g)...)
	}
	for _, kv := range q["buildArg"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			a.fail(w, r, bad("buildArg", "buildArg must be KEY=VALUE, got %q", mgmt.ShortID(kv)))
			return
		}
		o.BuildArgs[k] = v
	}
	// Secret build args come in a header, not the query: a URL is what
	// proxies and access logs record.
	for _, kv := range r.Header.Values(BuildSecretHeader) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			a.fail(w, r, bad(BuildSecretHeader, "%s must be KEY=VALUE", BuildSecretHeader))
			return
		}
		if o.SecretArgs == nil {
			o.SecretArgs = map[string]string{}
		}
		o.SecretArgs[k] = v
	}
	id := pathID(r)
	if _, _, err := a.endpoint(r, id); err != nil {
		a.fail(w, r, err)
		return
	}
	b, err := a.cfg.Builds.Submit(r.Context(), id, o, r.Body)
	var tl *builder.TooLargeError
	if errors.As(err, &tl) {
		problem(w, http.StatusRequestEntityTooLarge, tl.Error())
		return
	}
	a.answer(w, r, http.StatusAccepted, viewBuild(b), err)
}

func (a *API) createGitBuild(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		a.fail(w, r, bad("query", "a git build takes its options in the JSON body (dockerfile, target, buildArgs), not as query parameters"))
		return
	}
	var body gitBuildBody
	if err := decode(r, &body); err != nil {
		a.fail(w, r, err)
		return
	}
	if body.Git == nil {
		a.fail(w, r, bad("git", "git is required: {\"git\": {\"url\": ..., \"ref\": ...}}"))
		return
	}
	id := pathID(r)
	if _, _, err := a.endpoint(r, id); err != nil {
		a.fail(w, r, err)
		return
	}
	g := mgmt.GitSource{URL: body.Git.URL, Ref: body.Git.Ref, ContextPath: body.Git.ContextPath, CredentialID: body.Git.CredentialID}
	b, err := a.cfg.Builds.SubmitGit(r.Context(), id, mgmt.BuildInput{Dockerfile: body.Dockerfile, Target: body.Target, BuildArgs: body.BuildArgs, SecretArgs: body.SecretBuildArgs, Git: &g, Given: body.Given})
	a.answer(w, r, http.StatusAccepted, viewBuild(b), err)
}

func (a *API) cancelBuild(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Builds == nil {
		problem(w, http.StatusServiceUnavailable, "builds need the Docker runtime: this Berth has none")
		return
	}
	b, err := a.cfg.Builds.Cancel(r.Context(), pathID(r), mux.Vars(r)["buildId"])
	a.answer(w, r, http.StatusOK, viewBuild(b), err)
}

// buildLogs streams a build's log as the worker logs are streamed: the
// log so far, then (follow, the default) the lines as they come until the
// build ends.
func (a *API) buildLogs(w http.ResponseWriter, r *http.Request) {
	lq, err := parseLogQuery(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	id, bid := pathID(r), mux.Vars(r)["buildId"]
	if _, err := a.cfg.Mgmt.Build(r.Context(), id, bid); err != nil {
		a.fail(w, r, err)
		return
	}
	lq.source = "build"
	a.sendLogs(w, r, lq, "build "+bid, a.cfg.Builds != nil, func(ctx context.Context) (io.ReadCloser, error) {
		return a.cfg.Builds.Logs(ctx, id, bid, lq.follow)
	})
}

// rollbackBody is Berth's rollback request: the release version to go
// back to (absent: the newest earlier build's).
type rollbackBody struct {
	Version *int `json:"version"`
}

// rollback moves the endpoint back onto an earlier build's image: a new
// release. It answers the endpoint.
func (a *API) rollback(w http.ResponseWriter, r *http.Request) {
	var b rollbackBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	v := 0
	if b.Version != nil {
		if *b.Version < 1 {
			a.fail(w, r, bad("version", "version must be a release's version (1 or more), got %d", *b.Version))
			return
		}
		v = *b.Version
	}
	if _, err := a.cfg.Mgmt.RollbackEndpoint(r.Context(), pathID(r), v); err != nil {
		a.fail(w, r, err)
		return
	}
	e, t, err := a.endpoint(r, pathID(r))
	a.answer(w, r, http.StatusOK, a.viewEndpoint(e, t, baseURL(r)), err)
}
