package mgmt

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"berth/internal/gittest"
	"berth/store"
)

func TestVerifyGitSignature(t *testing.T) {
	const secret = "s3cret-of-the-endpoint"
	body := []byte(`{"ref":"refs/heads/main"}`)
	good := gittest.Sign(secret, body)
	for _, c := range []struct {
		name string
		sigs []string
		ok   bool
	}{
		{"github sha256=", []string{"sha256=" + good}, true},
		{"gitea bare hex", []string{"", good}, true},
		{"gitea both", []string{"sha256=" + good, good}, true},
		{"forgejo upper-case hex", []string{hexUpper(good)}, true},
		{"none", nil, false},
		{"empty headers", []string{"", ""}, false},
		{"wrong secret", []string{"sha256=" + gittest.Sign("another secret!!", body)}, false},
		{"other body", []string{"sha256=" + gittest.Sign(secret, []byte(`{"ref":"refs/heads/dev"}`))}, false},
		{"one right one wrong", []string{"sha256=" + good, gittest.Sign("another secret!!", body)}, false},
		{"not hex", []string{"sha256=zz"}, false},
		{"truncated", []string{"sha256=" + good[:62]}, false},
		{"sha1 form", []string{"sha1=" + good}, false},
	} {
		err := VerifyGitSignature(secret, body, c.sigs)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrBadSignature)) {
			t.Errorf("%s: %v, want ok=%v (ErrBadSignature when refused)", c.name, err, c.ok)
		}
	}
}

func hexUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 32
		}
	}
	return string(b)
}

func TestParseGitEvent(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "gitevents", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	date := time.Date(2026, 11, 27, 14, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name, event string
		body        []byte
		want        GitEvent
		field       string // an Invalid error naming it
	}{
		{"github push", "push", read("github-push.json"), GitEvent{Kind: "push", Branch: "main",
			Commit: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", Message: "handler: say hello\n\nA longer body.", CommitDate: &date}, ""},
		{"gitea push", "push", read("gitea-push.json"), GitEvent{Kind: "push", Branch: "develop",
			Commit: "bffeb74224043ba2feb48d137756c8a9331c449a", Message: "Webhooks Yay!", CommitDate: ptrTo(time.Date(2017, 3, 13, 17, 52, 11, 0, time.UTC))}, ""},
		{"branch deleted", "push", read("github-delete.json"), GitEvent{Kind: "push", Branch: "main", Commit: zeroSHA, Deleted: true}, ""},
		{"annotated tag push: the commit, not the tag object", "push", read("github-tag-push.json"), GitEvent{Kind: "push", Tag: "v1.2.0",
			Commit: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c", Message: "handler: say hello", CommitDate: &date}, ""},
		{"release published", "release", read("github-release.json"), GitEvent{Kind: "release", Action: "published", Tag: "v1.2.0"}, ""},
		{"ping", "ping", read("github-ping.json"), GitEvent{Kind: "ping"}, ""},
		{"another event is read as nothing", "issues", []byte(`not json`), GitEvent{Kind: "issues"}, ""},
		{"malformed push", "push", []byte(`{"ref": "refs/heads/main", "after": `), GitEvent{}, "body"},
		{"push of a note ref", "push", []byte(`{"ref": "refs/notes/x", "after": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"}`), GitEvent{}, "ref"},
		{"push without a commit", "push", []byte(`{"ref": "refs/heads/main"}`), GitEvent{}, "after"},
		{"malformed release", "release", []byte(`[]`), GitEvent{}, "body"},
		{"release without a tag", "release", []byte(`{"action": "published", "release": {}}`), GitEvent{}, "release"},
	} {
		got, err := ParseGitEvent(c.event, c.body)
		if c.field != "" {
			var me *Error
			if !errors.As(err, &me) || me.Kind != Invalid || me.Field != c.field {
				t.Errorf("%s: %v, want an Invalid error naming %s", c.name, err, c.field)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if (got.CommitDate == nil) != (c.want.CommitDate == nil) || (got.CommitDate != nil && !got.CommitDate.Equal(*c.want.CommitDate)) {
			t.Errorf("%s: commit date %v, want %v", c.name, got.CommitDate, c.want.CommitDate)
		}
		got.CommitDate, c.want.CommitDate = nil, nil
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestMatchGitEvent(t *testing.T) {
	branch := store.GitTrack{Repository: "https://git.example/o/r.git", Branch: "main", Dockerfile: "docker/Dockerfile"}
	tags := store.GitTrack{Repository: "https://git.example/o/r.git", Tags: "v*"}
	const sha = "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
	for _, c := range []struct {
		name    string
		g       store.GitTrack
		ev      GitEvent
		result  string
		key     string
		fromRef string
	}{
		{"push to the branch", branch, GitEvent{Kind: "push", Branch: "main", Commit: sha}, GitBuild, "commit:" + sha, sha},
		{"push to another branch", branch, GitEvent{Kind: "push", Branch: "dev", Commit: sha}, GitIgnored, "", ""},
		{"branch deleted", branch, GitEvent{Kind: "push", Branch: "main", Commit: zeroSHA, Deleted: true}, GitIgnored, "", ""},
		{"tag push on a branch endpoint", branch, GitEvent{Kind: "push", Tag: "v1", Commit: sha}, GitIgnored, "", ""},
		{"release on a branch endpoint", branch, GitEvent{Kind: "release", Action: "published", Tag: "v1"}, GitIgnored, "", ""},
		{"ping", branch, GitEvent{Kind: "ping"}, GitPong, "", ""},
		{"other event", branch, GitEvent{Kind: "issues"}, GitIgnored, "", ""},
		{"release published, tag matches", tags, GitEvent{Kind: "release", Action: "published", Tag: "v1.2.0"}, GitBuild, "tag:v1.2.0", "refs/tags/v1.2.0"},
		{"release created (a draft)", tags, GitEvent{Kind: "release", Action: "created", Tag: "v1.2.0"}, GitIgnored, "", ""},
		{"release of a tag not matching", tags, GitEvent{Kind: "release", Action: "published", Tag: "nightly"}, GitIgnored, "", ""},
		{"tag push matching", tags, GitEvent{Kind: "push", Tag: "v2", Commit: sha}, GitBuild, "tag:v2", sha},
		{"tag push not matching", tags, GitEvent{Kind: "push", Tag: "x2", Commit: sha}, GitIgnored, "", ""},
		{"branch push on a tags endpoint", tags, GitEvent{Kind: "push", Branch: "main", Commit: sha}, GitIgnored, "", ""},
	} {
		p := MatchGitEvent(c.g, c.ev)
		if p.Result != c.result || p.Key != c.key || (c.fromRef != "" && p.Ref() != c.fromRef) || (p.Result != GitBuild && p.Reason == "") {
			t.Errorf("%s: %+v, want %s key %q ref %q (and a reason when not a build)", c.name, p, c.result, c.key, c.fromRef)
		}
		if p.Result == GitBuild && (p.Repository != c.g.Repository || p.Dockerfile != c.g.Dockerfile) {
			t.Errorf("%s: the build is of %q %q, want the endpoint's repository and Dockerfile", c.name, p.Repository, p.Dockerfile)
		}
	}
}

func TestApplyGit(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, c := range []struct {
		name  string
		cur   *store.GitTrack
		in    GitTrackInput
		want  *store.GitTrack
		field string
	}{
		{"branch", nil, GitTrackInput{Repository: s("https://github.com/o/r.git"), Branch: s("main")},
			&store.GitTrack{Repository: "https://github.com/o/r.git", Branch: "main"}, ""},
		{"refs/heads/ is cut", nil, GitTrackInput{Repository: s("git@github.com:o/r.git"), Branch: s("refs/heads/release/1.x")},
			&store.GitTrack{Repository: "git@github.com:o/r.git", Branch: "release/1.x"}, ""},
		{"tags, dockerfile, context", nil, GitTrackInput{Repository: s("ssh://git@host:2222/o/r.git"), Tags: s("v*"), Dockerfile: s("./worker/Dockerfile"), Context: s("worker/")},
			&store.GitTrack{Repository: "ssh://git@host:2222/o/r.git", Tags: "v*", Dockerfile: "worker/Dockerfile", Context: "worker"}, ""},
		{"switch to tags", &store.GitTrack{Repository: "https://h/o/r", Branch: "main"}, GitTrackInput{Tags: s("*")},
			&store.GitTrack{Repository: "https://h/o/r", Tags: "*"}, ""},
		{"off", &store.GitTrack{Repository: "https://h/o/r", Branch: "main"}, GitTrackInput{Off: true}, nil, ""},
		{"no repository", nil, GitTrackInput{Branch: s("main")}, nil, "git.repository"},
		{"neither branch nor tags", nil, GitTrackInput{Repository: s("https://h/o/r")}, nil, "git.branch"},
		{"both", nil, GitTrackInput{Repository: s("https://h/o/r"), Branch: s("main"), Tags: s("v*")}, nil, "git.branch"},
		{"password in the URL", nil, GitTrackInput{Repository: s("https://me:ghp_x@github.com/o/r.git"), Branch: s("main")}, nil, "git.repository"},
		{"file URL", nil, GitTrackInput{Repository: s("file:///srv/r.git"), Branch: s("main")}, nil, "git.repository"},
		{"not a URL", nil, GitTrackInput{Repository: s("just words"), Branch: s("main")}, nil, "git.repository"},
		{"control character", nil, GitTrackInput{Repository: s("https://h/o/r\n"), Branch: s("main")}, nil, "git.repository"},
		{"bad branch", nil, GitTrackInput{Repository: s("https://h/o/r"), Branch: s("a..b")}, nil, "git.branch"},
		{"credential", nil, GitTrackInput{Repository: s("https://h/o/r"), Branch: s("main"), CredentialID: s("gitcred_1")},
			&store.GitTrack{Repository: "https://h/o/r", Branch: "main", CredentialID: "gitcred_1"}, ""},
		{"bad pattern", nil, GitTrackInput{Repository: s("https://h/o/r"), Tags: s("v[")}, nil, "git.tags"},
		{"dockerfile leaving the tree", nil, GitTrackInput{Repository: s("https://h/o/r"), Branch: s("main"), Dockerfile: s("../Dockerfile")}, nil, "git.dockerfile"},
		{"short secret", nil, GitTrackInput{Repository: s("https://h/o/r"), Branch: s("main"), WebhookSecret: s("short")}, nil, "git.webhookSecret"},
		{"secret and rotate", nil, GitTrackInput{Repository: s("https://h/o/r"), Branch: s("main"), WebhookSecret: s("0123456789abcdef"), RotateWebhookSecret: true}, nil, "git.webhookSecret"},
		{"off with fields", &store.GitTrack{Repository: "https://h/o/r", Branch: "main"}, GitTrackInput{Off: true, Branch: s("x")}, nil, "git"},
	} {
		e := store.Endpoint{Git: c.cur}
		err := applyGit(&e, c.in)
		if c.field != "" {
			var me *Error
			if !errors.As(err, &me) || me.Kind != Invalid || me.Field != c.field {
				t.Errorf("%s: %v, want an Invalid error naming %s", c.name, err, c.field)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if (e.Git == nil) != (c.want == nil) || (e.Git != nil && *e.Git != *c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, e.Git, c.want)
		}
	}
}
