package httpapi_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestValidFuzzSeedsAccepted is the other half of the fuzz targets'
// property: every seed named valid-* in testdata/fuzz is input within the
// rules, and must be accepted (2xx; GraphQL: 200 without errors). A valid
// /run body must be accepted by /runsync as well, which the fuzzer skips.
func TestValidFuzzSeedsAccepted(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	a := newFuzzAPI(t)
	files, err := filepath.Glob("testdata/fuzz/*/valid-*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no valid seeds: %v", err)
	}
	for _, file := range files {
		target := filepath.Base(filepath.Dir(file))
		t.Run(target+"/"+filepath.Base(file), func(t *testing.T) {
			vals := readSeed(t, file)
			ok := func(code int, body string) {
				t.Helper()
				if code/100 != 2 {
					t.Fatalf("valid seed refused: %d %s", code, body)
				}
			}
			switch target {
			case "FuzzRunBody":
				rec := a.run(vals[0].([]byte))
				ok(rec.Code, rec.Body.String())
				rec = a.do("POST", "/v2/"+a.ep+"/runsync?wait=1000", vals[0].([]byte))
				ok(rec.Code, rec.Body.String())
			case "FuzzRunFields":
				// The target itself decides validity from the rules; the
				// valid seed must be one it accepts.
				body, _ := json.Marshal(map[string]any{"input": json.RawMessage(vals[0].(string)), "webhook": vals[1].(string),
					"policy": map[string]any{"ttl": vals[2], "executionTimeout": vals[3], "lowPriority": vals[4]}})
				rec := a.run(body)
				ok(rec.Code, rec.Body.String())
			case "FuzzWorkerBodies":
				which := vals[1].(byte)
				if which&4 != 0 { // a job of its own, taken by the worker the target posts as
					a.job = a.mustID(t, "POST", "/v2/"+a.ep+"/run", `{"input":{}}`)
					for i := 0; ; i++ { // earlier seeds' jobs come out first
						rec := a.do("GET", "/v2/"+a.ep+"/job-take/fw", nil)
						if rec.Code == 200 && strings.Contains(rec.Body.String(), a.job) {
							break
						}
						if i > 1000 {
							t.Fatal("the seed's job was never handed out")
						}
					}
				}
				_, _, rec := a.workerBody(vals[0].([]byte), which)
				ok(rec.Code, rec.Body.String())
				if which&4 != 0 && !strings.Contains(rec.Body.String(), `"accepted":true`) {
					t.Fatalf("the worker's report on its own job was not accepted: %s", rec.Body)
				}
			case "FuzzManagementBodies":
				_, _, rec := a.mgmtBody(vals[0].(byte), vals[1].([]byte))
				ok(rec.Code, rec.Body.String())
			case "FuzzV2Bodies":
				_, _, rec := a.v2Body(vals[0].(byte), vals[1].([]byte))
				ok(rec.Code, rec.Body.String())
			case "FuzzGraphQL":
				_, rec := a.graphql(vals[0].([]byte))
				if rec.Code != 200 || strings.Contains(rec.Body.String(), `"errors"`) {
					t.Fatalf("valid GraphQL seed: %d %s", rec.Code, rec.Body)
				}
			default:
				t.Fatalf("no check for valid seeds of %s", target)
			}
		})
	}
}

// readSeed parses a corpus file in Go's fuzz format ("go test fuzz v1"
// then one typed literal per line) for the types the targets use.
func readSeed(t *testing.T, file string) []any {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a fuzz corpus file", file)
	}
	var out []any
	for _, l := range lines[1:] {
		typ, lit, _ := strings.Cut(l, "(")
		lit = strings.TrimSuffix(lit, ")")
		var v any
		var err error
		switch typ {
		case "[]byte":
			var s string
			s, err = strconv.Unquote(lit)
			v = []byte(s)
		case "string":
			v, err = strconv.Unquote(lit)
		case "byte", "uint8":
			var c rune
			c, _, _, err = strconv.UnquoteChar(strings.Trim(lit, "'"), '\'')
			v = byte(c)
		case "int64":
			v, err = strconv.ParseInt(lit, 10, 64)
		case "bool":
			v, err = strconv.ParseBool(lit)
		default:
			t.Fatalf("%s: type %s not handled", file, typ)
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", file, l, err)
		}
		out = append(out, v)
	}
	return out
}
