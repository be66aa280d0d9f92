package graphqlapi_test

import (
	"berth/internal/apptest"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"
)

// BenchmarkGetEndpoints: runpod.get_endpoints() (GraphQL, 50 endpoints,
// every field it selects) against GET /v1/endpoints of the same records in
// the same run, as the ratio graphql/v1 of their latencies.
func BenchmarkGetEndpoints(b *testing.B) {
	cfg := apptest.Config(b, testKey)
	cfg.Logger = quiet
	a := apptest.Start(b, cfg)
	base := a.URL()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
	do := func(method, path string, body []byte) []byte {
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("%s %s: %d %s", method, path, res.StatusCode, out)
		}
		return out
	}
	var tpl struct{ ID string }
	json.Unmarshal(do("POST", "/v1/templates", []byte(`{"name":"t","imageName":"a:1"}`)), &tpl)
	for i := range 50 {
		do("POST", "/v1/endpoints", fmt.Appendf(nil, `{"name":"e%d","templateId":"%s","env":{"A":"1","B":"2"}}`, i, tpl.ID))
	}
	doc, err := os.ReadFile("testdata/runpod-python/get_endpoints.graphql")
	if err != nil {
		b.Fatal(err)
	}
	gql, _ := json.Marshal(map[string]string{"query": string(doc)})

	measure := func(n int, f func()) time.Duration {
		start := time.Now()
		for range n {
			f()
		}
		return time.Since(start) / time.Duration(n)
	}
	b.ResetTimer()
	g := measure(b.N, func() { do("POST", "/graphql", gql) })
	b.StopTimer()
	v1 := measure(b.N, func() { do("GET", "/v1/endpoints", nil) })
	b.ReportMetric(float64(g.Microseconds()), "graphql-µs/op")
	b.ReportMetric(float64(v1.Microseconds()), "v1-µs/op")
	b.ReportMetric(float64(g)/float64(v1), "graphql/v1")
}
