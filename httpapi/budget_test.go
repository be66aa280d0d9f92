package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"berth/httplimit"
	"berth/internal/apitest"
	"berth/store"
)

// TestExpandingBodiesAreRefused: a body under the 1 MB caps that would
// decode into many times its size (a million-element array, an env map of
// 80,000 keys) is refused before it is decoded, naming the limit, quickly
// and without allocating more than a few times the body. (Before: 1 MB of
// `[1,1,…]` in GraphQL variables allocated 48 MB and held 26 MB, 1 MB of env
// keys 13 MB — per concurrent request.) Nothing is written.
func TestExpandingBodiesAreRefused(t *testing.T) {
	// No validating wrapper (it decodes bodies itself), so what is
	// allocated is the product's.
	e := newEnv(t, apitest.RawConn(httplimit.Limits{}))
	keys := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"K%d":""`, i)
		}
		return b.String()
	}
	ones := "[" + strings.Repeat("1,", 400000) + "1]"
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
	}{
		{"GraphQL variables", "POST", "/graphql", `{"query":"query($a: [Int]) { myself { id } }","variables":{"a":` + ones + `}}`, 413},
		{"v1 template env", "POST", "/v1/templates", `{"name":"big","imageName":"x:1","env":{` + keys(80000) + `}}`, 413},
		{"v2 template env", "POST", "/v2/templates", `{"name":"big","imageName":"x:1","env":{` + keys(80000) + `}}`, 400},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		req, _ := http.NewRequest(tc.method, e.Base+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+apitest.Key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if res.StatusCode != tc.code || !strings.Contains(string(body), "JSON values; the limit is 10000") {
			t.Errorf("%s: got %d %.200s, want %d naming the limit", tc.name, res.StatusCode, body, tc.code)
			continue
		}
		if alloc > uint64(16*len(tc.body)) {
			t.Errorf("%s: %d KB body, %d KB allocated to refuse it", tc.name, len(tc.body)>>10, alloc>>10)
		}
		t.Logf("%s (%d KB): %d in %s, %.1f MB allocated", tc.name, len(tc.body)>>10, res.StatusCode, took.Round(time.Millisecond), float64(alloc)/(1<<20))
	}
	n := 0
	e.DB.Scan(store.Templates, func(string, []byte) error { n++; return nil })
	if n != 0 {
		t.Errorf("%d templates written", n)
	}
}
