package v2api

import (
	"net/http"

	"berth/mgmt"
)

// gitCredentialBody creates a git credential (Berth's own): the secret is
// taken, never answered.
type gitCredentialBody struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"` // TOKEN or SSH_KEY
	Username   string `json:"username"`
	Secret     string `json:"secret"`
	KnownHosts string `json:"knownHosts"`
}

// GitCredential is a stored git credential as answered (no secret).
type GitCredential = mgmt.GitCredential

// GitCredentialList is the stored git credentials, oldest first.
type GitCredentialList struct {
	GitCredentials []GitCredential `json:"gitCredentials"`
}

func (a *API) listGitCredentials(w http.ResponseWriter, r *http.Request) {
	cs, err := a.cfg.Mgmt.ListGitCredentials(r.Context())
	a.answer(w, r, http.StatusOK, GitCredentialList{GitCredentials: cs}, err)
}

func (a *API) createGitCredential(w http.ResponseWriter, r *http.Request) {
	var b gitCredentialBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := a.cfg.Mgmt.CreateGitCredential(r.Context(), mgmt.GitCredentialInput{Name: b.Name, Kind: b.Kind, Username: b.Username, Secret: b.Secret, KnownHosts: b.KnownHosts})
	a.answer(w, r, http.StatusCreated, c, err)
}

func (a *API) deleteGitCredential(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeleteGitCredential(r.Context(), pathID(r)))
}
