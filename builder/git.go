package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/net/proxy"

	"berth/builder/srctar"
	"berth/mgmt"
	"berth/store"
)

// Git sources are cloned with go-git (no git binary). Its transports are
// process-wide (client.InstallProtocol), the outbound policy is a
// builder's: every connection of a clone is dialled by the clone's own
// gitEnv — found in the request's context (http, https) or, for ssh, in
// gitEnvs by the id of the "proxy" URL go-git is handed — which dials
// through the policy, counts the bytes read against the clone's bound and
// closes the connection when the clone ends.

// gitEnv is one clone's connections' policy, bound and life.
type gitEnv struct {
	ctx   context.Context
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)
	left  atomic.Int64
	limit int64
}

type gitEnvKey struct{}

var (
	gitOnce  sync.Once
	gitEnvMu sync.Mutex
	gitEnvs  = map[string]*gitEnv{}
	gitEnvN  atomic.Int64
)

// errFetchTooLarge is a clone reading past MaxGitFetchBytes.
type errFetchTooLarge struct{ limit int64 }

func (e errFetchTooLarge) Error() string {
	return fmt.Sprintf("the clone read over %d bytes (%.1f MiB) from the repository: the limit is 4 × berth serve --build-max-context", e.limit, float64(e.limit)/(1<<20))
}

func installGitTransports() {
	gitOnce.Do(func() {
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			env, _ := ctx.Value(gitEnvKey{}).(*gitEnv)
			if env == nil {
				return nil, errors.New("git: a connection outside a Berth clone")
			}
			return env.connect(ctx, network, addr)
		}
		hc := &http.Client{
			Transport: &http.Transport{Proxy: nil, DialContext: dial, DisableKeepAlives: true, ForceAttemptHTTP2: true,
				TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: time.Minute},
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if len(via) >= 5 {
					return errors.New("stopped after 5 redirects")
				}
				if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
					return fmt.Errorf("redirect to a %q URL", req.URL.Scheme)
				}
				return nil
			},
		}
		client.InstallProtocol("https", githttp.NewClient(hc))
		client.InstallProtocol("http", githttp.NewClient(hc))
		// No ~/.ssh/config of the server's user: the URL says where.
		gitssh.DefaultSSHConfig = nil
		proxy.RegisterDialerType("berth-git", func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
			gitEnvMu.Lock()
			env := gitEnvs[u.Host]
			gitEnvMu.Unlock()
			if env == nil {
				return nil, errors.New("git: the clone has ended")
			}
			return sshDialer{env}, nil
		})
	})
}

// connect dials addr through the policy; the connection counts what it
// reads and is closed when the clone ends.
func (e *gitEnv) connect(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := e.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := &countedConn{Conn: c, env: e}
	stop := context.AfterFunc(e.ctx, func() { c.Close() })
	cc.stop = stop
	return cc, nil
}

type countedConn struct {
	net.Conn
	env  *gitEnv
	stop func() bool
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.env.left.Add(-int64(n)) < 0 {
		c.Conn.Close()
		return 0, errFetchTooLarge{c.env.limit}
	}
	return n, err
}

func (c *countedConn) Close() error {
	c.stop()
	return c.Conn.Close()
}

// sshDialer is go-git's ssh "proxy": the clone's policy.
type sshDialer struct{ env *gitEnv }

func (d sshDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(d.env.ctx, network, addr)
}

func (d sshDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(d.env.ctx, cancel)
	defer stop()
	return d.env.connect(ctx, network, addr)
}

// checkOutbound refuses a repository URL the outbound policy forbids for
// sure (an address literal or localhost it does not allow); names are
// judged again at every connection.
func (s *Service) checkOutbound(raw string) error {
	if s.cfg.Outbound == nil {
		return &mgmt.Error{Kind: mgmt.Unavailable, Msg: "git builds are not configured on this Berth (no outbound policy)"}
	}
	u, err := mgmt.ParseGitURL("git.url", raw)
	if err != nil {
		return err
	}
	port := u.Port
	if port == "" {
		port = map[string]string{"https": "443", "http": "80", "ssh": "22"}[u.Scheme]
	}
	scheme := "http"
	if u.Scheme == "https" {
		scheme = "https"
	}
	if err := s.cfg.Outbound.CheckURL(scheme + "://" + net.JoinHostPort(u.Host, port) + "/"); err != nil {
		return mgmt.InvalidInput("git.url", "git.url: %v", err)
	}
	return nil
}

// checkCredential says whether a git source's credential fits its URL:
// a token goes over https only (never in clear), an ssh URL needs a key.
func checkCredential(g store.GitSource, c *store.GitCredential) error {
	u, err := mgmt.ParseGitURL("git.url", g.URL)
	if err != nil {
		return err
	}
	switch {
	case u.Scheme == "ssh" && (c == nil || c.Kind != store.GitCredentialSSHKey):
		return mgmt.InvalidInput("git.credentialId", "git.credentialId: an ssh repository URL needs a git credential of kind %s (Berth has no SSH agent)", store.GitCredentialSSHKey)
	case c == nil:
		return nil
	case c.Kind == store.GitCredentialToken && u.Scheme != "https":
		return mgmt.InvalidInput("git.credentialId", "git.credentialId: a %s credential is sent over https:// only, not %s://", store.GitCredentialToken, u.Scheme)
	case c.Kind == store.GitCredentialSSHKey && u.Scheme != "ssh":
		return mgmt.InvalidInput("git.credentialId", "git.credentialId: an %s credential is for ssh:// or git@host:path URLs", store.GitCredentialSSHKey)
	}
	return nil
}

// sourceCredential reads the credential g names (nil: none) and checks
// that it fits g's URL.
func (s *Service) sourceCredential(g store.GitSource) (*store.GitCredential, error) {
	if g.CredentialID == "" {
		return nil, checkCredential(g, nil)
	}
	c, err := s.cfg.Records.GitCredential(g.CredentialID)
	if mgmt.KindOf(err) == mgmt.NotFound {
		return nil, mgmt.InvalidInput("git.credentialId", "git.credentialId %q is not a stored git credential", mgmt.ShortID(g.CredentialID))
	}
	if err != nil {
		return nil, err
	}
	return &c, checkCredential(g, &c)
}

// gitAuth is the transport auth of a credential (nil: none).
func gitAuth(g store.GitSource, c *store.GitCredential, dir string) (transport.AuthMethod, error) {
	if c == nil {
		return nil, nil
	}
	switch c.Kind {
	case store.GitCredentialToken:
		user := c.Username
		if user == "" {
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: c.Secret}, nil
	case store.GitCredentialSSHKey:
		u, _ := mgmt.ParseGitURL("git.url", g.URL)
		user := u.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, []byte(c.Secret), "")
		if err != nil {
			return nil, fmt.Errorf("the credential's private key: %w", err)
		}
		kh := filepath.Join(dir, "known_hosts")
		if err := os.WriteFile(kh, []byte(c.KnownHosts), 0o600); err != nil {
			return nil, err
		}
		cb, err := knownhosts.New(kh)
		if err != nil {
			return nil, fmt.Errorf("the credential's known hosts: %w", err)
		}
		keys.HostKeyCallback = ssh.HostKeyCallback(cb)
		return keys, nil
	}
	return nil, fmt.Errorf("credential kind %q", c.Kind)
}

// cloned is what a clone found.
type cloned struct {
	repo   *git.Repository
	commit *object.Commit
	branch string
}

// clone fetches g's commit into a bare repository in dir: the ref's tip
// only (depth 1) where the server allows it; a commit the server will not
// send alone (or an abbreviated one) takes a full fetch.
func (s *Service) clone(ctx context.Context, g store.GitSource, dir string, say func(string)) (cloned, error) {
	installGitTransports()
	cred, err := s.sourceCredential(g)
	if err != nil {
		return cloned{}, err
	}
	auth, err := gitAuth(g, cred, dir)
	if err != nil {
		return cloned{}, err
	}
	env := &gitEnv{ctx: ctx, dial: s.cfg.Outbound.DialContext, limit: s.cfg.MaxGitFetchBytes}
	env.left.Store(s.cfg.MaxGitFetchBytes)
	ctx = context.WithValue(ctx, gitEnvKey{}, env)
	var po transport.ProxyOptions
	if u, _ := mgmt.ParseGitURL("git.url", g.URL); u.Scheme == "ssh" {
		id := fmt.Sprintf("c%d", gitEnvN.Add(1))
		gitEnvMu.Lock()
		gitEnvs[id] = env
		gitEnvMu.Unlock()
		defer func() {
			gitEnvMu.Lock()
			delete(gitEnvs, id)
			gitEnvMu.Unlock()
		}()
		po.URL = "berth-git://" + id
	}

	st := filesystem.NewStorage(osfs.New(filepath.Join(dir, "repo")), cache.NewObjectLRUDefault())
	repo, err := git.Init(st, nil)
	if err != nil {
		return cloned{}, fmt.Errorf("init the clone: %w", err)
	}
	remote, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{g.URL}})
	if err != nil {
		return cloned{}, fmt.Errorf("init the clone: %w", err)
	}
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth, ProxyOptions: po})
	if err != nil {
		return cloned{}, fmt.Errorf("list the repository's refs: %w", err)
	}
	byName := map[plumbing.ReferenceName]*plumbing.Reference{}
	for _, r := range refs {
		byName[r.Name()] = r
	}
	fetch := func(depth int, specs ...gitconfig.RefSpec) error {
		err := remote.FetchContext(ctx, &git.FetchOptions{RefSpecs: specs, Depth: depth, Tags: git.NoTags, Auth: auth, ProxyOptions: po})
		if errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil
		}
		return err
	}
	fetchAll := func() error {
		say("berth: fetching the whole repository (the commit is not a branch's or tag's tip)")
		return fetch(0, "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
	}
	out := cloned{repo: repo, branch: g.Branch}
	var want plumbing.Hash
	var name plumbing.ReferenceName
	switch {
	case g.Commit != "":
		want = plumbing.NewHash(g.Commit)
		if r := byName[plumbing.NewBranchReferenceName(g.Branch)]; g.Branch != "" && r != nil && r.Hash() == want {
			name = r.Name()
		}
	case g.Ref == "":
		head := byName[plumbing.HEAD]
		if head == nil {
			return cloned{}, errors.New("the repository has no default branch (HEAD): give a ref")
		}
		if head.Type() == plumbing.SymbolicReference {
			name = head.Target()
		} else if r := findTip(refs, head.Hash()); r != "" {
			name = r
		} else {
			want = head.Hash()
		}
	default:
		for _, n := range []plumbing.ReferenceName{plumbing.NewBranchReferenceName(g.Ref), plumbing.NewTagReferenceName(g.Ref), plumbing.ReferenceName(g.Ref)} {
			if r := byName[n]; r != nil && (n.IsBranch() || n.IsTag()) {
				name = n
				break
			}
		}
		if name == "" && !mgmt.IsCommitRef(g.Ref) {
			return cloned{}, fmt.Errorf("ref %q is not a branch, a tag or a commit of the repository (branches: %s)", g.Ref, branchList(refs))
		}
	}
	switch {
	case name != "":
		if name.IsBranch() {
			out.branch = name.Short()
		}
		if err := fetch(1, gitconfig.RefSpec("+"+name+":"+name)); err != nil {
			return cloned{}, fmt.Errorf("fetch %s: %w", name.Short(), err)
		}
		r, err := repo.Reference(name, true)
		if err != nil {
			return cloned{}, fmt.Errorf("fetch %s: %w", name.Short(), err)
		}
		want = r.Hash()
		if t, err := repo.TagObject(want); err == nil { // an annotated tag
			c, err := t.Commit()
			if err != nil {
				return cloned{}, fmt.Errorf("tag %s: %w", name.Short(), err)
			}
			want = c.Hash
		}
	case !want.IsZero():
		if err := fetch(1, gitconfig.RefSpec(want.String()+":refs/berth/build")); err != nil {
			if err := fetchAll(); err != nil {
				return cloned{}, fmt.Errorf("fetch: %w", err)
			}
		}
	default: // an abbreviated (or full) commit hash
		if err := fetchAll(); err != nil {
			return cloned{}, fmt.Errorf("fetch: %w", err)
		}
		h, err := findCommit(repo, g.Ref)
		if err != nil {
			return cloned{}, err
		}
		want = h
	}
	c, err := repo.CommitObject(want)
	if err != nil {
		return cloned{}, fmt.Errorf("commit %s is not in the repository: %w", want, err)
	}
	out.commit = c
	return out, nil
}

// findTip is the branch whose tip is h ("" none).
func findTip(refs []*plumbing.Reference, h plumbing.Hash) plumbing.ReferenceName {
	for _, r := range refs {
		if r.Name().IsBranch() && r.Hash() == h {
			return r.Name()
		}
	}
	return ""
}

// branchList names a few branches, for an error.
func branchList(refs []*plumbing.Reference) string {
	var bs []string
	for _, r := range refs {
		if r.Name().IsBranch() {
			bs = append(bs, r.Name().Short())
		}
	}
	sort.Strings(bs)
	if len(bs) > 10 {
		bs = append(bs[:10], "…")
	}
	if len(bs) == 0 {
		return "none"
	}
	return strings.Join(bs, ", ")
}

// findCommit finds the one commit whose hash starts with prefix.
func findCommit(repo *git.Repository, prefix string) (plumbing.Hash, error) {
	if len(prefix) == 40 {
		return plumbing.NewHash(prefix), nil
	}
	it, err := repo.CommitObjects()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer it.Close()
	var found []plumbing.Hash
	err = it.ForEach(func(c *object.Commit) error {
		if strings.HasPrefix(c.Hash.String(), prefix) {
			found = append(found, c.Hash)
		}
		return nil
	})
	switch {
	case err != nil:
		return plumbing.ZeroHash, err
	case len(found) == 0:
		return plumbing.ZeroHash, fmt.Errorf("ref %q is not a branch, a tag or a commit of the repository", prefix)
	case len(found) > 1:
		return plumbing.ZeroHash, fmt.Errorf("ref %q is ambiguous: %d commits start with it", prefix, len(found))
	}
	return found[0], nil
}

// contextTree is the tree of c at contextPath.
func contextTree(c *object.Commit, contextPath string) (*object.Tree, error) {
	tree, err := c.Tree()
	if err != nil {
		return nil, err
	}
	if contextPath != "" {
		if tree, err = tree.Tree(contextPath); err != nil {
			return nil, fmt.Errorf("git.contextPath %q is not a directory of commit %s", contextPath, c.Hash.String()[:12])
		}
	}
	return tree, nil
}

// writeGitContext writes the tree of c at contextPath as the build
// context tar, as berth deploy writes a directory (srctar): its
// .dockerignore applies, the Dockerfile is never ignored.
func writeGitContext(w io.Writer, repo *git.Repository, c *object.Commit, contextPath, dockerfile string) error {
	tree, err := contextTree(c, contextPath)
	if err != nil {
		return err
	}
	var rules []srctar.Rule
	if f, err := tree.File(".dockerignore"); err == nil {
		r, err := f.Reader()
		if err != nil {
			return err
		}
		rules, err = srctar.ParseIgnore(io.LimitReader(r, 1<<20))
		r.Close()
		if err != nil {
			return err
		}
	}
	var entries []srctar.Entry
	walker := object.NewTreeWalker(tree, true, nil)
	defer walker.Close()
	for {
		name, e, err := walker.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if name != dockerfile && name != ".dockerignore" && srctar.Ignored(rules, name) {
			continue
		}
		switch {
		case e.Mode.IsFile():
			blob, err := repo.BlobObject(e.Hash)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			mode, _ := e.Mode.ToOSFileMode()
			ent := srctar.Entry{Name: name, Mode: int64(mode.Perm()), Size: blob.Size, Open: blob.Reader}
			if mode&os.ModeSymlink != 0 {
				r, err := blob.Reader()
				if err != nil {
					return err
				}
				target, err := io.ReadAll(io.LimitReader(r, 4096))
				r.Close()
				if err != nil {
					return err
				}
				ent = srctar.Entry{Name: name, Mode: 0o777, Symlink: string(target)}
			} else if mode.Perm() == 0 {
				ent.Mode = 0o644
			}
			entries = append(entries, ent)
		case e.Mode == 0o040000: // a directory
			entries = append(entries, srctar.Entry{Name: name, Dir: true, Mode: 0o755})
		default: // a submodule: not fetched
		}
	}
	_, err = srctar.Write(w, entries)
	return err
}

// prepareGit clones r's git source and tars its context into a file of
// Dir, recording the commit; msg says why it failed.
func (s *Service) prepareGit(ctx context.Context, r *run) (file string, b store.Build, msg string) {
	g := *r.b.Git
	at := g.Ref
	switch {
	case g.Commit != "":
		at = "commit " + g.Commit
	case at == "":
		at = "the default branch"
	}
	r.log.line(fmt.Sprintf("berth: cloning %s at %s", g.URL, at))
	if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return "", r.b, "clone: " + err.Error()
	}
	dir, err := os.MkdirTemp(s.cfg.Dir, "clone-*")
	if err != nil {
		return "", r.b, "clone: " + err.Error()
	}
	defer os.RemoveAll(dir)
	cctx, cancel := context.WithTimeoutCause(ctx, s.cfg.StepTimeout,
		fmt.Errorf("the clone exceeded its maximum time of %s", s.cfg.StepTimeout))
	defer cancel()
	cl, err := s.clone(cctx, g, dir, r.log.line)
	if err != nil {
		if cause := context.Cause(cctx); cause != nil {
			err = cause
		}
		var big errFetchTooLarge
		if errors.As(err, &big) {
			err = big
		}
		return "", r.b, fmt.Sprintf("clone %s at %s failed: %v", g.URL, at, err)
	}
	c := cl.commit
	first, _, _ := strings.Cut(strings.TrimSpace(c.Message), "\n")
	r.log.line(fmt.Sprintf("berth: commit %s %q", c.Hash, mgmt.ShortID(first)))
	if _, err := contextTree(c, g.ContextPath); err != nil {
		return "", r.b, err.Error()
	}
	f, err := os.CreateTemp(s.cfg.Dir, "git-*.tar")
	if err != nil {
		return "", r.b, "store the build context: " + err.Error()
	}
	keep := false
	defer func() {
		f.Close()
		if !keep {
			os.Remove(f.Name())
		}
	}()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeGitContext(pw, cl.repo, c, g.ContextPath, r.b.Dockerfile)) }()
	digest, n, err := s.receive(f, pr, r.b.Dockerfile)
	pr.CloseWithError(errors.New("stopped"))
	if err != nil {
		return "", r.b, fmt.Sprintf("make the build context from commit %s: %v", c.Hash.String()[:12], err)
	}
	if err := f.Close(); err != nil {
		return "", r.b, "store the build context: " + err.Error()
	}
	b, err = s.cfg.Records.ResolveGitBuild(r.b.ID, mgmt.GitCommit{Hash: c.Hash.String(), Message: c.Message, Branch: cl.branch, Date: c.Committer.When}, digest, n)
	if err != nil {
		return "", r.b, "record the commit: " + err.Error()
	}
	keep = true
	return f.Name(), b, ""
}
