package v1api

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"berth/apply"
	"berth/builder"
	"berth/httpapi/internal/httpx"
	"berth/mgmt"
)

// applyFile makes a declarative file true (POST /v1/apply, Berth's
// extension; `berth apply -f FILE` posts it with its ${VAR}s expanded):
// dryRun=true answers the plan only, prune=true deletes what the file does
// not name. The answer is apply.Result: every action and the ids by name.
// A file that does not decode or names nothing it can find is 400; a
// refusal while executing answers by its kind, naming the action (the
// actions before it are done, applying again converges).
//
// A file whose endpoints build from a context directory comes as
// multipart/form-data: the part "file" is the JSON, and the part
// "context.N" the context tar of endpoints[N] (berth apply packs it as
// berth deploy packs a folder). The answer comes once the builds ended.
func (a *API) applyFile(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, "dryRun", "prune")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	o := apply.Options{Prune: flags["prune"], DryRun: flags["dryRun"], Builder: a.cfg.Builds,
		Log: func(ep, line string) { a.cfg.Logger.Debug("apply build", "endpoint", ep, "line", line) }}
	var f apply.File
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		var code int
		f, o.Contexts, code, err = readApplyParts(r)
		for _, c := range o.Contexts {
			defer c.Remove()
		}
		if err != nil {
			writeErr(w, code, err.Error())
			return
		}
	} else {
		body, berr := httpx.ReadBody(w, r, 16<<20)
		if berr != nil {
			writeErr(w, berr.Code, berr.Msg)
			return
		}
		if f, err = apply.Decode(body); err != nil {
			writeErr(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	res, err := apply.Apply(r.Context(), a.cfg.Mgmt, f, o)
	var me *mgmt.Error
	var pe apply.PlanError
	var tl *builder.TooLargeError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, res)
	case errors.As(err, &pe):
		writeErr(w, http.StatusBadRequest, err.Error())
	case errors.As(err, &me):
		writeErr(w, status(me.Kind), err.Error())
	case errors.As(err, &tl):
		writeErr(w, http.StatusRequestEntityTooLarge, err.Error())
	default:
		a.fail(w, r, err)
	}
}

// maxApplyContext bounds one uploaded context; the builder's own limit
// (berth serve --build-max-context) is applied when it is submitted.
const maxApplyContext = 4 << 30

// readApplyParts reads a multipart apply: the file, then the contexts
// (spooled to temporary files; the caller removes them, also on an error).
func readApplyParts(r *http.Request) (apply.File, map[string]apply.Context, int, error) {
	ctxs := map[string]apply.Context{}
	mr, err := r.MultipartReader()
	if err != nil {
		return apply.File{}, ctxs, http.StatusBadRequest, fmt.Errorf("the multipart body: %w", err)
	}
	var f apply.File
	seen := false
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return apply.File{}, ctxs, http.StatusBadRequest, fmt.Errorf("the multipart body: %w", err)
		}
		name := p.FormName()
		switch {
		case name == "file" && !seen:
			raw, err := io.ReadAll(io.LimitReader(p, 16<<20+1))
			if err != nil {
				return apply.File{}, ctxs, http.StatusBadRequest, fmt.Errorf("the part \"file\": %w", err)
			}
			if len(raw) > 16<<20 {
				return apply.File{}, ctxs, http.StatusRequestEntityTooLarge, fmt.Errorf("the part \"file\" is over 16 MiB")
			}
			if f, err = apply.Decode(raw); err != nil {
				return apply.File{}, ctxs, http.StatusBadRequest, err
			}
			seen = true
		case strings.HasPrefix(name, "context.") && seen:
			i, err := strconv.Atoi(strings.TrimPrefix(name, "context."))
			if err != nil || i < 0 || i >= len(f.Endpoints) || f.Endpoints[i].Build == nil || f.Endpoints[i].Build.Context == nil {
				return apply.File{}, ctxs, http.StatusBadRequest, fmt.Errorf("the part %q names no endpoint of the file that builds from a context", name)
			}
			en := *f.Endpoints[i].Name
			if _, dup := ctxs[en]; dup {
				return apply.File{}, ctxs, http.StatusBadRequest, fmt.Errorf("the part %q is given twice", name)
			}
			c, err := apply.SpoolContext(p, maxApplyContext)
			var tl *builder.TooLargeError
			switch {
			case errors.As(err, &tl):
				return apply.File{}, ctxs, http.StatusRequestEntityTooLarge, err
			case err != nil:
				return apply.File{}, ctxs, http.StatusBadRequest, fmt.Errorf("the part %q: %w", name, err)
			}
			ctxs[en] = c
		default:
			return apply.File{}, ctxs, http.StatusBadRequest, fmt.Errorf("the part %q: want \"file\" (first), then \"context.N\" for endpoints[N]", name)
		}
	}
	if !seen {
		return apply.File{}, ctxs, http.StatusBadRequest, errors.New("the multipart body has no part \"file\"")
	}
	// Read to the end: the connection's read deadline is cleared there.
	_, _ = io.Copy(io.Discard, r.Body)
	return f, ctxs, 0, nil
}
