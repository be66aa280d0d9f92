package mgmt_test

import (
	"strings"
	"testing"

	"berth/mgmt"
)

func TestParseGitURL(t *testing.T) {
	for _, c := range []struct {
		raw        string
		scheme     string
		host, path string
		bad        string // a word of the error; "" when taken
	}{
		{raw: "https://git.example.com/team/worker.git", scheme: "https", host: "git.example.com", path: "/team/worker.git"},
		{raw: "http://10.0.0.5:8080/worker", scheme: "http", host: "10.0.0.5", path: "/worker"},
		{raw: "ssh://git@git.example.com:2222/team/worker.git", scheme: "ssh", host: "git.example.com", path: "/team/worker.git"},
		{raw: "git@github.com:team/worker.git", scheme: "ssh", host: "github.com", path: "team/worker.git"},
		{raw: "github.com:team/worker.git", scheme: "ssh", host: "github.com", path: "team/worker.git"},
		{raw: "git@[::1]:worker.git", scheme: "ssh", host: "::1", path: "worker.git"},
		{raw: "", bad: "required"},
		{raw: "file:///srv/repo.git", bad: "scheme"},
		{raw: "git://example.com/repo.git", bad: "scheme"},
		{raw: "ext::sh -c touch% /tmp/pwned", bad: "space"},
		{raw: "/srv/repo.git", bad: "not a repository URL"},
		{raw: "../repo", bad: "not a repository URL"},
		{raw: "https://user:tok3n@example.com/r.git", bad: "password"},
		{raw: "https://tok3n@example.com/r.git", bad: "user name"},
		{raw: "https://example.com/r.git?x=1", bad: "query"},
		{raw: "https://example.com", bad: "no path"},
		{raw: "https:///r.git", bad: "no host"},
		{raw: "git@host:-oProxyCommand=x", bad: "not a repository URL"},
		{raw: "https://example.com/r\x1b[31m.git", bad: "control character"},
		{raw: "https://example.com/" + strings.Repeat("a", 2100), bad: "2048"},
	} {
		u, err := mgmt.ParseGitURL("git.url", c.raw)
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) || mgmt.KindOf(err) != mgmt.Invalid {
				t.Errorf("%q: got %v (%+v), want an invalid-input error saying %q", c.raw, err, u, c.bad)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "git.url") {
				t.Errorf("%q: error %q does not name the field", c.raw, err)
			}
			continue
		}
		if err != nil || u.Scheme != c.scheme || u.Host != c.host || u.Path != c.path {
			t.Errorf("%q: got %+v, %v; want %s %s %s", c.raw, u, err, c.scheme, c.host, c.path)
		}
	}
}

func TestCheckGitRef(t *testing.T) {
	for _, c := range []struct {
		ref string
		ok  bool
	}{
		{"", true}, {"main", true}, {"feature/x-1", true}, {"v1.2.3", true}, {"refs/heads/main", true},
		{"0123abc", true}, {strings.Repeat("a", 40), true},
		{"-main", false}, {"a..b", false}, {"a b", false}, {"a~1", false}, {"a^", false}, {"a:b", false},
		{"x.lock", false}, {"HEAD", false}, {"@", false}, {"a/.b", false}, {"a//b", false}, {"a/", false},
		{"main\n", false}, {"a@{1}", false}, {"a*", false}, {strings.Repeat("b", 256), false},
	} {
		err := mgmt.CheckGitRef("git.ref", c.ref)
		if (err == nil) != c.ok {
			t.Errorf("%q: got %v, want ok=%v", c.ref, err, c.ok)
		}
		if err != nil && mgmt.KindOf(err) != mgmt.Invalid {
			t.Errorf("%q: %v is not invalid input", c.ref, err)
		}
	}
}

func TestCheckGitSource(t *testing.T) {
	for _, c := range []struct {
		g     mgmt.GitSource
		field string // "" when taken
		ctx   string
	}{
		{g: mgmt.GitSource{URL: "https://h/r.git", ContextPath: "./workers/a/"}, ctx: "workers/a"},
		{g: mgmt.GitSource{URL: "https://h/r.git", ContextPath: "."}, ctx: ""},
		{g: mgmt.GitSource{URL: "https://h/r.git", Commit: strings.Repeat("ab", 20), Branch: "main"}},
		{g: mgmt.GitSource{URL: "https://h/r.git", ContextPath: "../up"}, field: "git.contextPath"},
		{g: mgmt.GitSource{URL: "https://h/r.git", ContextPath: "/etc"}, field: "git.contextPath"},
		{g: mgmt.GitSource{URL: "https://h/r.git", Commit: "abc"}, field: "git.commit"},
		{g: mgmt.GitSource{URL: "https://h/r.git", Ref: "a..b"}, field: "git.ref"},
		{g: mgmt.GitSource{URL: "https://h/r.git", Branch: "-x"}, field: "git.branch"},
		{g: mgmt.GitSource{URL: "file:///r"}, field: "git.url"},
	} {
		g, err := mgmt.CheckGitSource(c.g)
		if c.field != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.field) {
				t.Errorf("%+v: got %v, want an error naming %s", c.g, err, c.field)
			}
			continue
		}
		if err != nil || g.ContextPath != c.ctx {
			t.Errorf("%+v: got %+v, %v; want context path %q", c.g, g, err, c.ctx)
		}
	}
}
