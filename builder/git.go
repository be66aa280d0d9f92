package builder

import (
	"context"
	"net"

	"berth/mgmt"
	"berth/store"
)

// checkOutbound refuses a repository URL the outbound policy forbids for
// sure (an address literal or localhost it does not allow); names are
// judged again at every connection.
func (s *Service) checkOutbound(raw string) error {
	if s.cfg.Outbound == nil {
		return &mgmt.Error{Kind: mgmt.Unavailable, Msg: "git builds are not configured on this Berth (no outbound policy)"}
	}
	u, err := mgmt.ParseGitURL("git.url", raw)
	if err != nil {
		return err
	}
	port := u.Port
	if port == "" {
		port = map[string]string{"https": "443", "http": "80", "ssh": "22"}[u.Scheme]
	}
	scheme := "http"
	if u.Scheme == "https" {
		scheme = "https"
	}
	if err := s.cfg.Outbound.CheckURL(scheme + "://" + net.JoinHostPort(u.Host, port) + "/"); err != nil {
		return mgmt.InvalidInput("git.url", "git.url: %v", err)
	}
	return nil
}

// prepareGit clones r's git source and tars its context into a file of
// Dir; msg says why it failed.
func (s *Service) prepareGit(ctx context.Context, r *run) (file string, b store.Build, msg string) {
	return "", r.b, "clone: git sources are not implemented yet"
}
