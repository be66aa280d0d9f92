package v1api

import (
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"berth/mgmt"
)

// Berth's own key management (RunPod manages keys in its console) and
// the audit trail; httpapi's key check lets only All keys reach them.

// keyInput is the body of POST /v1/keys and PATCH /v1/keys/{keyId}.
type keyInput struct {
	Name       *string           `json:"name"`
	Permission *string           `json:"permission"`
	Endpoints  map[string]string `json:"endpoints"` // endpoint id → NONE | READ | READ_WRITE
	Enabled    *bool             `json:"enabled"`
}

func (in keyInput) mgmt() mgmt.KeyInput {
	out := mgmt.KeyInput{Name: in.Name, Level: in.Permission, Grants: in.Endpoints}
	if in.Enabled != nil {
		d := !*in.Enabled
		out.Disabled = &d
	}
	return out
}

// createdKey is a new key with its secret, shown this once.
type createdKey struct {
	mgmt.KeyView
	Key string `json:"key"`
}

func (a *API) createKey(w http.ResponseWriter, r *http.Request) {
	var in keyInput
	if !decodeBody(w, r, &in) {
		return
	}
	k, secret, err := a.cfg.Mgmt.CreateKey(r.Context(), in.mgmt())
	a.answer(w, r, http.StatusOK, createdKey{k, secret}, err)
}

func (a *API) listKeys(w http.ResponseWriter, r *http.Request) {
	ks, err := a.cfg.Mgmt.Keys(r.Context())
	a.answer(w, r, http.StatusOK, ks, err)
}

func (a *API) getKey(w http.ResponseWriter, r *http.Request) {
	k, err := a.cfg.Mgmt.Key(r.Context(), mux.Vars(r)["keyId"])
	a.answer(w, r, http.StatusOK, k, err)
}

func (a *API) updateKey(w http.ResponseWriter, r *http.Request) {
	var in keyInput
	if !decodeBody(w, r, &in) {
		return
	}
	k, err := a.cfg.Mgmt.UpdateKey(r.Context(), mux.Vars(r)["keyId"], in.mgmt())
	a.answer(w, r, http.StatusOK, k, err)
}

func (a *API) deleteKey(w http.ResponseWriter, r *http.Request) {
	_, err := a.cfg.Mgmt.DeleteKey(r.Context(), mux.Vars(r)["keyId"])
	a.answer(w, r, http.StatusNoContent, nil, err)
}

// listAudit answers the audit trail, newest first; ?limit= (1-10000,
// default 100) bounds it.
func (a *API) listAudit(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > mgmt.AuditMax {
			writeErr(w, http.StatusBadRequest, "limit must be a whole number from 1 to "+strconv.Itoa(mgmt.AuditMax))
			return
		}
		limit = n
	}
	es, err := a.cfg.Mgmt.AuditLog(r.Context(), limit)
	a.answer(w, r, http.StatusOK, es, err)
}
