package mgmt

import (
	"strings"
	"testing"
)

func TestCleanContextPath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"", ".", true},
		{"Dockerfile", "Dockerfile", true},
		{"./docker/Dockerfile.gpu", "docker/Dockerfile.gpu", true},
		{"a/../Dockerfile", "Dockerfile", true},
		{"../Dockerfile", "", false},
		{"a/../../x", "", false},
		{"..", "", false},
		{"/etc/passwd", "", false},
		{`..\x`, "", false},
		{"bad\x01name", "", false},
	} {
		got, err := CleanContextPath("dockerfile", c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("CleanContextPath(%q) = %q, %v; want %q ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && (KindOf(err) != Invalid || !strings.Contains(err.Error(), "dockerfile")) {
			t.Errorf("CleanContextPath(%q): %v, want an Invalid error naming dockerfile", c.in, err)
		}
	}
}

func TestCheckBuildInput(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    BuildInput
		field string // "" ok
	}{
		{"defaults", BuildInput{}, ""},
		{"args", BuildInput{BuildArgs: map[string]string{"BASE_IMAGE": "x:1", "_A1": ""}}, ""},
		{"stage", BuildInput{Target: "runtime-1.2"}, ""},
		{"escaping dockerfile", BuildInput{Dockerfile: "../Dockerfile"}, "dockerfile"},
		{"bad target", BuildInput{Target: "a b"}, "target"},
		{"bad arg name", BuildInput{BuildArgs: map[string]string{"1A": "x"}}, "buildArgs"},
		{"control char", BuildInput{BuildArgs: map[string]string{"A": "x\ny"}}, "buildArgs"},
	} {
		df, err := CheckBuildInput(c.in)
		var me *Error
		switch {
		case c.field == "" && (err != nil || df == ""):
			t.Errorf("%s: %q %v, want ok", c.name, df, err)
		case c.field != "" && (err == nil || !asErr(err, &me) || me.Field != c.field):
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.field)
		}
	}
}

func asErr(err error, me **Error) bool {
	e, ok := err.(*Error)
	*me = e
	return ok
}

// The image name is Berth's, the endpoint's name made a repository name,
// and the tag follows the source and options: same input, same name.
func TestBuildImageName(t *testing.T) {
	d1 := BuildDigest(strings.Repeat("a", 64), "Dockerfile", "", map[string]string{"A": "1", "B": "2"}, "")
	d2 := BuildDigest(strings.Repeat("a", 64), "Dockerfile", "", map[string]string{"B": "2", "A": "1"}, "")
	d3 := BuildDigest(strings.Repeat("a", 64), "Dockerfile", "", map[string]string{"A": "1", "B": "3"}, "")
	if d1 != d2 || d1 == d3 {
		t.Fatalf("digests: %s %s %s: want the first two equal, the third different", d1, d2, d3)
	}
	// Secret args: the digest follows their HMAC (the value changes it,
	// the key too), and holds no value.
	k1, k2 := []byte("key one"), []byte("key two")
	s1 := SecretArgsDigest(k1, map[string]string{"T": "v1"})
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{s1, SecretArgsDigest(k1, map[string]string{"T": "v1"}), true},
		{s1, SecretArgsDigest(k1, map[string]string{"T": "v2"}), false},
		{s1, SecretArgsDigest(k2, map[string]string{"T": "v1"}), false},
		{SecretArgsDigest(k1, nil), "", true},
		{d1, BuildDigest(strings.Repeat("a", 64), "Dockerfile", "", map[string]string{"A": "1", "B": "2"}, s1), false},
	} {
		if (c.a == c.b) != c.same {
			t.Errorf("digests %q and %q: same %v, want %v", c.a, c.b, c.a == c.b, c.same)
		}
	}
	for name, want := range map[string]string{"My Worker_1": "berth/my-worker-1:", "---": "berth/endpoint:", "hello": "berth/hello:"} {
		if got := BuildImageName(name, d1); got != want+d1[:12] {
			t.Errorf("BuildImageName(%q) = %q, want %q", name, got, want+d1[:12])
		}
	}
}
