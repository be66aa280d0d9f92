package v1api

import (
	"errors"
	"net/http"

	"berth/apply"
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
func (a *API) applyFile(w http.ResponseWriter, r *http.Request) {
	flags, err := queryBools(r, "dryRun", "prune")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	body, berr := httpx.ReadBody(w, r, 16<<20)
	if berr != nil {
		writeErr(w, berr.Code, berr.Msg)
		return
	}
	f, err := apply.Decode(body)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	res, err := apply.Apply(r.Context(), a.cfg.Mgmt, f, flags["prune"], flags["dryRun"])
	var me *mgmt.Error
	var pe apply.PlanError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, res)
	case errors.As(err, &pe):
		writeErr(w, http.StatusBadRequest, err.Error())
	case errors.As(err, &me):
		writeErr(w, status(me.Kind), err.Error())
	default:
		a.fail(w, r, err)
	}
}
