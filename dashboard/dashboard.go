// Package dashboard is Berth's web dashboard: a static page, its script and
// its style, embedded in the binary (no build step, no external assets, works
// offline). The page holds no data: it asks for the API key once, keeps it
// in sessionStorage, and reads everything it shows from the /v1 and /v2 API
// with an Authorization header, polling while it is visible and following
// logs over streamed fetches.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

type file struct {
	body  []byte
	ctype string
	etag  string
}

var files = load()

// types are fixed here rather than read from the host's mime tables, which
// differ between systems.
var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

func load() map[string]file {
	out := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct, ok := types[path.Ext(p)]
		if !ok {
			return fmt.Errorf("%s: no content type for %q", p, path.Ext(p))
		}
		out[strings.TrimPrefix(p, "static/")] = file{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("dashboard: embedded files: " + err.Error())
	}
	return out
}

// csp keeps the page to its own files and its own origin's API: no inline
// script, nothing from elsewhere, not framed.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page at / and its files under /ui/. GET and HEAD only.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := "index.html"
		if r.URL.Path != "/" {
			name = strings.TrimPrefix(r.URL.Path, "/ui/")
		}
		f, ok := files[name]
		if !ok || name == "index.html" && r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.ctype)
		h.Set("ETag", f.etag)
		h.Set("Cache-Control", "no-cache") // revalidate: an upgrade shows at once
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if name == "index.html" {
			h.Set("Content-Security-Policy", csp)
			h.Set("X-Frame-Options", "DENY")
		}
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
