package mgmt

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"berth/store"
)

// Git sources: a build whose context is a directory of a git repository
// at a branch, a tag or a commit. The builder clones it; the rules here
// are what a git source may be (its URL, ref and paths) and what its
// record shows of the commit built.

// GitSource is a git build's source: URL (https://, http://, ssh:// or
// scp-like git@host:path), Ref (a branch, a tag or a commit's hex; "" the
// repository's default branch), ContextPath (the build context's
// directory inside the repository; "" its root), Commit and Branch (what a
// push webhook knows: the commit to build and the branch it was pushed
// to; Commit set, it is built whatever Ref says) and CredentialID (a
// stored git credential; "" none).
type GitSource = store.GitSource

// GitCommit is what a clone found: the commit built and its branch.
type GitCommit struct {
	Hash    string
	Message string
	Branch  string
	Date    time.Time
}

var (
	scpLikeRe = regexp.MustCompile(`^(?:([A-Za-z0-9._-]+)@)?([A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):(.+)$`)
	hexRe     = regexp.MustCompile(`^[0-9a-f]{7,40}$`)
	commitRe  = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// GitURL is a checked repository URL: Scheme is https, http or ssh; Host
// the host (without brackets); Port "" when the scheme's own.
type GitURL struct {
	Scheme, User, Host, Port, Path string
}

// ParseGitURL checks a repository URL (field names it in errors): only
// https://, http://, ssh:// and scp-like [user@]host:path; no password in
// it (credentials are stored apart: a URL is shown in answers and logs).
func ParseGitURL(field, raw string) (GitURL, error) {
	if strings.TrimSpace(raw) == "" {
		return GitURL{}, invalid(field, "%s is required: the repository's https://, http://, ssh:// or git@host:path URL", field)
	}
	if err := CheckText(field, raw, false); err != nil {
		return GitURL{}, err
	}
	if len(raw) > 2048 {
		return GitURL{}, invalid(field, "%s is over 2048 bytes", field)
	}
	if strings.ContainsAny(raw, " \\") {
		return GitURL{}, invalid(field, "%s %s holds a space or a backslash", field, quote(ShortID(raw)))
	}
	if !strings.Contains(raw, "://") {
		m := scpLikeRe.FindStringSubmatch(raw)
		if m == nil || strings.HasPrefix(m[3], "-") || strings.HasPrefix(m[3], "//") {
			return GitURL{}, invalid(field, "%s %s is not a repository URL: https://, http://, ssh:// or git@host:path are taken", field, quote(ShortID(raw)))
		}
		return GitURL{Scheme: "ssh", User: m[1], Host: strings.Trim(m[2], "[]"), Path: m[3]}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return GitURL{}, invalid(field, "%s %s is not a URL: %v", field, quote(ShortID(raw)), err)
	}
	switch u.Scheme {
	case "https", "http", "ssh":
	default:
		return GitURL{}, invalid(field, "%s: the %s scheme is not taken: https://, http://, ssh:// or git@host:path", field, quote(ShortID(u.Scheme)))
	}
	if _, has := u.User.Password(); has {
		return GitURL{}, invalid(field, "%s holds a password: store it as a git credential and name it (credentialId) instead", field)
	}
	if u.User != nil && u.Scheme != "ssh" {
		return GitURL{}, invalid(field, "%s holds a user name: store the token as a git credential (with its user name) and name it (credentialId) instead", field)
	}
	if u.Hostname() == "" || strings.HasPrefix(u.Hostname(), "-") {
		return GitURL{}, invalid(field, "%s %s has no host", field, quote(ShortID(raw)))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return GitURL{}, invalid(field, "%s %s has a query or a fragment: a repository URL has neither", field, quote(ShortID(raw)))
	}
	if u.Path == "" || u.Path == "/" {
		return GitURL{}, invalid(field, "%s %s names no repository (no path)", field, quote(ShortID(raw)))
	}
	return GitURL{Scheme: u.Scheme, User: u.User.Username(), Host: u.Hostname(), Port: u.Port(), Path: u.Path}, nil
}

// CheckGitRef checks a branch, tag or commit name as git does
// (git-check-ref-format) with the fields' limits; "" passes.
func CheckGitRef(field, ref string) error {
	if ref == "" {
		return nil
	}
	if err := CheckText(field, ref, false); err != nil {
		return err
	}
	bad := func(why string) error {
		return invalid(field, "%s %s is not a branch, tag or commit name: %s", field, quote(ShortID(ref)), why)
	}
	switch {
	case len(ref) > 255:
		return invalid(field, "%s is over 255 bytes", field)
	case strings.ContainsAny(ref, " ~^:?*[\\"):
		return bad("it holds one of space ~ ^ : ? * [ \\")
	case strings.Contains(ref, "..") || strings.Contains(ref, "@{") || strings.Contains(ref, "//"):
		return bad(`it holds "..", "@{" or "//"`)
	case strings.HasPrefix(ref, "-") || strings.HasPrefix(ref, "/") || strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, "."):
		return bad(`it starts with "-" or "/", or ends with "/" or "."`)
	case strings.HasSuffix(ref, ".lock") || ref == "@" || ref == "HEAD":
		return bad(`it is "@" or "HEAD" or ends with ".lock" (leave it out for the default branch)`)
	}
	for _, part := range strings.Split(ref, "/") {
		if strings.HasPrefix(part, ".") {
			return bad(`a component starts with "."`)
		}
	}
	return nil
}

// IsCommitRef reports whether ref may be a commit (7 to 40 lowercase hex
// digits). A branch or tag of that name wins over a commit.
func IsCommitRef(ref string) bool { return hexRe.MatchString(ref) }

// CheckGitSource checks a git source (fields named as the API's: git.url,
// git.ref...) and returns it cleaned (the context path).
func CheckGitSource(g GitSource) (GitSource, error) {
	if _, err := ParseGitURL("git.url", g.URL); err != nil {
		return GitSource{}, err
	}
	if err := CheckGitRef("git.ref", g.Ref); err != nil {
		return GitSource{}, err
	}
	if err := CheckGitRef("git.branch", g.Branch); err != nil {
		return GitSource{}, err
	}
	if g.Commit != "" && !commitRe.MatchString(g.Commit) {
		return GitSource{}, invalid("git.commit", "git.commit %s is not a commit's full hash (40 lowercase hex digits)", quote(ShortID(g.Commit)))
	}
	cp, err := CleanContextPath("git.contextPath", g.ContextPath)
	if err != nil {
		return GitSource{}, err
	}
	if cp == "." {
		cp = ""
	}
	g.ContextPath = cp
	if g.CredentialID != "" {
		if err := CheckText("git.credentialId", g.CredentialID, false); err != nil {
			return GitSource{}, err
		}
		if len(g.CredentialID) > 64 {
			return GitSource{}, invalid("git.credentialId", "git.credentialId is over 64 bytes")
		}
	}
	return g, nil
}

// ResolveGitBuild records what a git build's clone found: the commit (its
// message and date), the branch, and the context tarred from it (its
// sha256 and size), which name the image as an upload's do — the same
// commit and options make the same image name, so a second build of
// them reuses the image.
func (s *Service) ResolveGitBuild(id string, c GitCommit, contextDigest string, contextBytes int64) (store.Build, error) {
	if len(contextDigest) != 64 {
		return store.Build{}, fmt.Errorf("resolve git build: context digest %q is not a sha256", contextDigest)
	}
	var b store.Build
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
		b.CommitHash, b.Branch = c.Hash, printableLine(c.Branch)
		b.CommitMessage = ClipMessage(printableText(c.Message))
		if !c.Date.IsZero() {
			d := c.Date.UTC()
			b.CommitDate = &d
		}
		b.SourceDigest = BuildDigest(contextDigest, b.Dockerfile, b.Target, b.BuildArgs, b.SecretsDigest)
		b.ImageName = BuildImageName(e.Name, b.SourceDigest)
		b.ContextBytes = contextBytes
		return tx.Apply(store.Put(store.Builds, id, b))
	})
	return b, err
}

// printableText drops the control characters of s but tabs and line
// breaks (a commit message is someone else's text).
func printableText(s string) string {
	return strings.Map(func(r rune) rune {
		if (r == '\t' || r == '\n') || !IsControl(r) {
			return r
		}
		return -1
	}, s)
}

func printableLine(s string) string {
	return strings.Map(func(r rune) rune {
		if IsControl(r) {
			return -1
		}
		return r
	}, s)
}

// checkGitCredentialRef is a hook for the stored-credential check of a
// build's source (none stored yet: any id is refused).
func checkGitCredentialRef(tx *store.Tx, id string) error {
	if id == "" {
		return nil
	}
	if tx.GetRaw(store.GitCredentials, id) == nil {
		return invalid("git.credentialId", "git.credentialId %s is not a stored git credential", quote(ShortID(id)))
	}
	return nil
}

// GitCredential reads a stored git credential, secret included: for the
// builder's clone only, never for an answer.
func (s *Service) GitCredential(id string) (store.GitCredential, error) {
	var c store.GitCredential
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		return getOr404(tx, store.GitCredentials, id, "git credential", &c)
	})
	return c, err
}
