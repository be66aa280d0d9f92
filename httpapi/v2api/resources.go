package v2api

import (
	"net/http"

	"berth/mgmt"
)

// ---- network volumes ----

// NetworkVolume is v2's NetworkVolume, with Berth's usage fields.
type NetworkVolume struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Size       int      `json:"size"`
	DataCenter string   `json:"dataCenter"`
	Type       string   `json:"type"`
	UsedBytes  int64    `json:"usedBytes"` // Berth
	Warnings   []string `json:"warnings,omitempty"`
	// Claim: Berth's, on the kubernetes runtime (mgmt.Volume.Claim).
	Claim *mgmt.VolumeClaim `json:"claim,omitempty"`
}

func viewVolume(v mgmt.Volume) NetworkVolume {
	t := v.Type
	if t == "" {
		t = "STANDARD"
	}
	return NetworkVolume{ID: v.ID, Name: v.Name, Size: v.Size, DataCenter: v.DataCenterID, Type: t, UsedBytes: v.UsedBytes, Warnings: v.Warnings, Claim: v.Claim}
}

// VolumeList is v2's ListNetworkVolumesResponse.
type VolumeList struct {
	NetworkVolumes []NetworkVolume `json:"networkVolumes"`
}

func (a *API) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := a.cfg.Mgmt.ListVolumes(r.Context())
	out := VolumeList{NetworkVolumes: []NetworkVolume{}}
	for _, v := range vs {
		out.NetworkVolumes = append(out.NetworkVolumes, viewVolume(v))
	}
	a.answer(w, r, http.StatusOK, out, err)
}

type volumeBody struct {
	Name       *string `json:"name"`
	Size       *int    `json:"size"`
	DataCenter *string `json:"dataCenter"`
	Type       *string `json:"type"`
}

func (a *API) createVolume(w http.ResponseWriter, r *http.Request) {
	var b volumeBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	v, err := a.cfg.Mgmt.CreateVolume(r.Context(), mgmt.VolumeInput{Name: b.Name, Size: b.Size, DataCenterID: b.DataCenter, Type: b.Type})
	a.answer(w, r, http.StatusCreated, viewVolume(v), err)
}

func (a *API) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := a.cfg.Mgmt.GetVolume(r.Context(), pathID(r))
	a.answer(w, r, http.StatusOK, viewVolume(v), err)
}

func (a *API) updateVolume(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Name *string `json:"name"`
		Size *int    `json:"size"`
	}
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	v, err := a.cfg.Mgmt.UpdateVolume(r.Context(), pathID(r), mgmt.VolumeInput{Name: b.Name, Size: b.Size})
	a.answer(w, r, http.StatusOK, viewVolume(v), err)
}

func (a *API) deleteVolume(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeleteVolume(r.Context(), pathID(r)))
}

// ---- registries ----

// Registry is v2's Registry (never the password).
type Registry struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Username string `json:"username"` // Berth
}

// RegistryList is v2's ListRegistriesResponse.
type RegistryList struct {
	Registries []Registry `json:"registries"`
}

func (a *API) listRegistries(w http.ResponseWriter, r *http.Request) {
	as, err := a.cfg.Mgmt.ListRegistryAuths(r.Context())
	out := RegistryList{Registries: []Registry{}}
	for _, x := range as {
		out.Registries = append(out.Registries, Registry{ID: x.ID, Name: x.Name, Username: x.Username})
	}
	a.answer(w, r, http.StatusOK, out, err)
}

func (a *API) createRegistry(w http.ResponseWriter, r *http.Request) {
	var b registryBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	x, err := a.cfg.Mgmt.CreateRegistryAuth(r.Context(), mgmt.RegistryAuthInput{Name: b.Name, Username: b.Username, Password: b.Password})
	a.answer(w, r, http.StatusCreated, Registry{ID: x.ID, Name: x.Name, Username: x.Username}, err)
}

func (a *API) getRegistry(w http.ResponseWriter, r *http.Request) {
	x, err := a.cfg.Mgmt.GetRegistryAuth(r.Context(), pathID(r))
	a.answer(w, r, http.StatusOK, Registry{ID: x.ID, Name: x.Name, Username: x.Username}, err)
}

func (a *API) deleteRegistry(w http.ResponseWriter, r *http.Request) {
	a.answer(w, r, http.StatusNoContent, nil, a.cfg.Mgmt.DeleteRegistryAuth(r.Context(), pathID(r)))
}

// ---- what one host cannot do ----

const (
	clustersWhy = "Instant Clusters are groups of multi-node GPU pods on RunPod's high-speed fabric; " +
		"a Berth host is one machine, so it has no clusters to list, create or bill. Use pods (/v2/pods) instead."
	delegationsWhy = "registry delegations grant RunPod's AWS account pull access to a private Amazon ECR registry; " +
		"Berth pulls with the host's Docker and stored registry credentials (/v2/registries), so there is no account to delegate to."
)

// cannot answers every call of a family one host cannot provide: 501 with
// a problem body saying why.
func (a *API) cannot(why string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotImplemented, why)
	}
}

// ---- account ----

// SSHKeys is v2's SshKeys.
type SSHKeys struct {
	Keys []string `json:"keys"`
}

func (a *API) getSSHKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := a.cfg.Mgmt.SSHKeys(r.Context())
	a.answer(w, r, http.StatusOK, SSHKeys{Keys: keys}, err)
}

func (a *API) putSSHKeys(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Keys *[]string `json:"keys"`
	} // v2's UpdateSshKeysRequest
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	keys, err := a.cfg.Mgmt.SetSSHKeys(r.Context(), *b.Keys)
	a.answer(w, r, http.StatusOK, SSHKeys{Keys: keys}, err)
}

// hfTokenBody sets the Hugging Face token (Berth's).
type hfTokenBody struct {
	Token *string `json:"token"`
}

func (a *API) getHFToken(w http.ResponseWriter, r *http.Request) {
	info, err := a.cfg.Mgmt.HFTokenInfo(r.Context())
	a.answer(w, r, http.StatusOK, info, err)
}

func (a *API) putHFToken(w http.ResponseWriter, r *http.Request) {
	var b hfTokenBody
	if err := decode(r, &b); err != nil {
		a.fail(w, r, err)
		return
	}
	info, err := a.cfg.Mgmt.SetHFToken(r.Context(), b.Token)
	a.answer(w, r, http.StatusOK, info, err)
}

func (a *API) clearHFToken(w http.ResponseWriter, r *http.Request) {
	info, err := a.cfg.Mgmt.ClearHFToken(r.Context())
	a.answer(w, r, http.StatusOK, info, err)
}

// registryBody is v2's CreateRegistryRequest.
type registryBody struct {
	Name     *string `json:"name"`
	Username *string `json:"username"`
	Password *string `json:"password"`
}
