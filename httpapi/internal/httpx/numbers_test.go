package httpx

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestWholeNumbers(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":3.0}`, `{"a":3}`},
		{`{"a":3e0,"b":30e-1,"c":-2.00,"d":0.0}`, `{"a":3,"b":3,"c":-2,"d":0}`},
		{`{"a":3.5,"b":1e-3}`, `{"a":3.5,"b":1e-3}`},                                         // not whole: as is
		{`{"a":1e20,"b":1e308}`, `{"a":1e20,"b":1e308}`},                                     // beyond 2^53: as is
		{`{"s":"3.0","t":"a\"3.0\\","n":[1.0, 2]}`, `{"s":"3.0","t":"a\"3.0\\","n":[1, 2]}`}, // strings untouched
		{`{"a":3,"b":true,"c":null}`, `{"a":3,"b":true,"c":null}`},
		{``, ``},
	} {
		if got := string(WholeNumbers([]byte(tc.in))); got != tc.want {
			t.Errorf("WholeNumbers(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// Whatever the body, the rewrite keeps what it means: valid JSON decodes
// to the same values, and invalid JSON stays invalid.
func FuzzWholeNumbers(f *testing.F) {
	f.Add([]byte(`{"a":3.0,"s":"x\"1.0","n":[1e15,-0.0,2.5e1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out := WholeNumbers(b)
		if !json.Valid(b) {
			if json.Valid(out) {
				t.Fatalf("invalid %q became valid %q", b, out)
			}
			return
		}
		var x, y any
		if err := json.Unmarshal(b, &x); err != nil {
			return
		}
		if err := json.Unmarshal(out, &y); err != nil || !reflect.DeepEqual(x, y) {
			t.Fatalf("%q → %q: %v", b, out, err)
		}
	})
}
