package loadtest

import (
	"berth/internal/proctest"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	gqlFlag    = flag.Int("gql-endpoints", 0, "endpoints for TestGraphQLInFlight; 0 skips it")
	gqlParFlag = flag.Int("gql-parallel", 16, "parallel queries of TestGraphQLInFlight")
	gqlBinFlag = flag.String("bin", "", "a berth binary to measure instead of one built from this tree (e.g. an older one, for a before/after)")
)

// TestGraphQLInFlight measures what GraphQL queries the per-request limits
// allow cost together: `berth serve --rate-limits=off` with N endpoints,
// then -gql-parallel (16) parallel queries of 99 aliases of myself { endpoints { … } },
// reporting Berth's peak RSS (VmHWM) and how many were answered, refused
// (503 SERVER_BUSY) or stopped by the resolve budget.
//
//	go test -run TestGraphQLInFlight -v -timeout 30m ./internal/loadtest -args -gql-endpoints 1000 [-bin OLD_BERTH]
func TestGraphQLInFlight(t *testing.T) {
	if *gqlFlag <= 0 {
		t.Skip("a load tool: go test -run TestGraphQLInFlight -v ./internal/loadtest -args -gql-endpoints 1000")
	}
	dir := t.TempDir()
	bin := *gqlBinFlag
	if bin == "" {
		bin = proctest.Build(t, "berth", false)
	}
	b := newBerth(t, bin, dir)
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "no-docker.sock")) // no containers: the API alone
	b.start()
	defer b.kill()
	var tpl map[string]any
	b.mustCall("POST", "/v1/templates", `{"name":"gql","imageName":"gql:1","env":{"A":"1","B":"2"}}`, &tpl)
	for i := range *gqlFlag {
		b.mustCall("POST", "/v1/endpoints", fmt.Sprintf(`{"name":"e%d","templateId":%q,"workersMax":0,"env":{"K":"V"}}`, i, tpl["id"]), nil)
	}
	_, idle, _ := b.rss()

	var q strings.Builder
	q.WriteString("{")
	for i := range 99 {
		fmt.Fprintf(&q, " a%d: myself { endpoints { id name templateId gpuIds gpuCount locations idleTimeout scalerType scalerValue workersMin workersMax executionTimeoutMs version createdAt } }", i)
	}
	q.WriteString(" }")
	body := fmt.Sprintf(`{"query":%q}`, q.String())

	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	began := time.Now()
	for range *gqlParFlag {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var v struct {
				Errors []struct {
					Message    string
					Extensions map[string]any
				}
			}
			code, err := b.call("POST", "/graphql", body, &v)
			what := fmt.Sprint(code)
			switch {
			case err != nil:
				what = "error: " + err.Error()
			case code == 200 && len(v.Errors) == 0:
				what = "answered"
			case code == 200:
				what = fmt.Sprint("refused: ", v.Errors[0].Extensions["code"], " ", v.Errors[0].Extensions["limit"])
			case code == 503:
				what = "refused: 503 SERVER_BUSY"
			}
			mu.Lock()
			outcomes[what]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	_, peak, _ := b.rss()
	t.Logf("%d endpoints, %d parallel 99-alias queries: peak RSS %s (before the queries %s), %s; outcomes %v",
		*gqlFlag, *gqlParFlag, mb(peak), mb(idle), time.Since(began).Round(time.Millisecond), outcomes)
}
