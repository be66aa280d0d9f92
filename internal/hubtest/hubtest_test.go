package hubtest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

	"berth/internal/hubtest"
)

// TestGeneratedReadAt: a generated file reads the same bytes at any offset
// as in one pass, its sha256 is of those bytes, and seeds differ.
func TestGeneratedReadAt(t *testing.T) {
	const size = 100_003
	g := hubtest.Generate(7, size)
	whole, err := io.ReadAll(io.NewSectionReader(g, 0, size))
	if err != nil || len(whole) != size {
		t.Fatalf("read whole: %d bytes, %v", len(whole), err)
	}
	if hubtest.Sha256(whole) != g.Sha256() || g.Size() != size {
		t.Fatalf("sha256 %s of the bytes, Sha256() %s; size %d", hubtest.Sha256(whole), g.Sha256(), g.Size())
	}
	for _, c := range []struct{ off, n int64 }{{0, 1}, {1, 15}, {15, 2}, {16, 16}, {17, 4096}, {65_535, 3}, {size - 5, 5}} {
		p := make([]byte, c.n)
		if n, err := g.ReadAt(p, c.off); int64(n) != c.n || (err != nil && err != io.EOF) || !bytes.Equal(p, whole[c.off:c.off+c.n]) {
			t.Errorf("ReadAt(%d, %d): %d %v, bytes differ: %v", c.n, c.off, n, err, !bytes.Equal(p, whole[c.off:c.off+c.n]))
		}
	}
	p := make([]byte, 10)
	if n, err := g.ReadAt(p, size-4); n != 4 || err != io.EOF {
		t.Errorf("ReadAt past the end: %d %v; want 4, EOF", n, err)
	}
	if hubtest.Generate(7, size) != g {
		t.Error("the same seed and size are not memoised")
	}
	if hubtest.Generate(8, size).Sha256() == g.Sha256() {
		t.Error("another seed gives the same bytes")
	}
}

// TestServeGenerated: a generated file is served as LFS, through the
// redirect (on the host asked) and with Range, and BytesSent counts its
// bytes.
func TestServeGenerated(t *testing.T) {
	hub := hubtest.New(t)
	g := hubtest.Generate(3, 70_000)
	repo := hub.Add(hubtest.Repo{ID: "acme/gen", Files: []hubtest.File{{Path: "w.safetensors", Gen: g}}})
	whole, _ := io.ReadAll(io.NewSectionReader(g, 0, g.Size()))
	for _, c := range []struct {
		rng  string
		from int
		code int
	}{{"", 0, 200}, {"bytes=65000-", 65000, 206}} {
		before := hub.BytesSent()
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/acme/gen/resolve/%s/w.safetensors", hub.URL, repo.Commit), nil)
		if c.rng != "" {
			req.Header.Set("Range", c.rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != c.code || !bytes.Equal(body, whole[c.from:]) {
			t.Errorf("%q: %d, %d bytes, %v; want %d and the bytes from %d", c.rng, resp.StatusCode, len(body), err, c.code, c.from)
		}
		if got := hub.BytesSent() - before; got != int64(len(whole)-c.from) {
			t.Errorf("%q: BytesSent grew by %d; want %d", c.rng, got, len(whole)-c.from)
		}
	}
}
