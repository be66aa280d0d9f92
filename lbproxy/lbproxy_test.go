package lbproxy

import (
	"net/http/httptest"
	"testing"
)

func TestRoute(t *testing.T) {
	b := New(Config{Domain: "lb.localhost"})
	for _, c := range []struct {
		host, path string
		ep, fwd    string
		ok         bool
	}{
		{"abc123.lb.localhost:8080", "/generate", "abc123", "/generate", true},
		{"ABC123.LB.localhost", "/x?y", "abc123", "/x", true},
		{"a.b.lb.localhost", "/x", "", "", false},
		{"127.0.0.1:8080", "/lb/abc123/v1/models", "abc123", "/v1/models", true},
		{"127.0.0.1:8080", "/lb/abc123", "abc123", "/", true},
		{"127.0.0.1:8080", "/lb/", "", "", false},
		{"127.0.0.1:8080", "/v2/abc123/run", "", "", false},
	} {
		r := httptest.NewRequest("GET", "http://"+c.host+c.path, nil)
		ep, fwd, ok := b.route(r)
		if ep != c.ep || fwd != c.fwd || ok != c.ok {
			t.Errorf("%s%s: %q %q %v, want %q %q %v", c.host, c.path, ep, fwd, ok, c.ep, c.fwd, c.ok)
		}
	}
}

func TestParseAffinity(t *testing.T) {
	for in, want := range map[string]affinity{
		"":                   {},
		"w1":                 {mode: "soft", id: "w1"},
		"strict w1":          {mode: "strict", id: "w1"},
		" strict-resume w1 ": {mode: "strict-resume", id: "w1"},
	} {
		if got := parseAffinity(in); got != want {
			t.Errorf("%q: %+v, want %+v", in, got, want)
		}
	}
}
