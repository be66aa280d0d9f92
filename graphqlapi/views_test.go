package graphqlapi

import (
	"reflect"
	"testing"
)

// dockerArgs and parseDockerArgs round-trip every command.
func TestDockerArgsRoundTrip(t *testing.T) {
	for _, c := range []struct {
		entrypoint, cmd []string
		shown           string
	}{
		{nil, []string{}, ""},
		{nil, []string{"python", "-u", "handler.py"}, "python -u handler.py"},
		{nil, []string{"sh", "-c", "echo hi && sleep 1"}, `sh -c "echo hi && sleep 1"`},
		{nil, []string{"echo", `say "hi"`}, `echo 'say "hi"'`},
		{nil, []string{"echo", "it's"}, `echo "it's"`},
		{nil, []string{"echo", `it's "x"`}, `{"cmd":["echo","it's \"x\""],"entrypoint":[]}`},
		{nil, []string{"a", ""}, `a ""`},
		{[]string{"/bin/sh", "-c"}, []string{"run"}, `{"cmd":["run"],"entrypoint":["/bin/sh","-c"]}`},
	} {
		shown := dockerArgs(c.entrypoint, c.cmd)
		if shown != c.shown {
			t.Errorf("dockerArgs(%q, %q) = %s, want %s", c.entrypoint, c.cmd, shown, c.shown)
		}
		ep, cmd, err := parseDockerArgs(shown)
		if err != nil {
			t.Errorf("parse %s: %v", shown, err)
			continue
		}
		if len(c.entrypoint) == 0 && len(ep) == 0 {
			ep = c.entrypoint
		}
		if !reflect.DeepEqual(ep, c.entrypoint) || !reflect.DeepEqual(cmd, c.cmd) {
			t.Errorf("round trip of %s: %q %q, want %q %q", shown, ep, cmd, c.entrypoint, c.cmd)
		}
	}
	if _, _, err := parseDockerArgs(`{"cmd": 3}`); err == nil {
		t.Error("a malformed JSON form was accepted")
	}
}
