package mgmt_test

import (
	"context"
	"errors"
	"testing"

	"berth/mgmt"
	"berth/store"
)

// TestEndedRequestsDoNothing: an operation whose request has ended (its
// client left, its deadline passed, the server is stopping) is refused as
// Unavailable, with the cause, before it reads or writes anything.
func TestEndedRequestsDoNothing(t *testing.T) {
	s, db := newService(t)
	gone := errors.New("the client went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(gone)
	_, err := s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("x:1")})
	wantErr(t, err, mgmt.Unavailable, "", "request ended", "went away")
	if !errors.Is(err, gone) {
		t.Errorf("the cause is lost: %v", err)
	}
	_, err = s.CreateEndpointWith(ctx, mgmt.EndpointInput{Name: ptr("e")}, mgmt.EndpointOptions{})
	wantErr(t, err, mgmt.Unavailable, "")
	_, err = s.CreateVolume(ctx, mgmt.VolumeInput{Name: ptr("v"), Size: ptr(10)})
	wantErr(t, err, mgmt.Unavailable, "")
	_, err = s.SetSSHKeys(ctx, []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB3 x"})
	wantErr(t, err, mgmt.Unavailable, "")
	_, err = s.ListTemplates(ctx, mgmt.TemplateFilter{})
	wantErr(t, err, mgmt.Unavailable, "")
	for _, b := range []string{store.Templates, store.Endpoints, store.Volumes} {
		n := 0
		db.Scan(b, func(string, []byte) error { n++; return nil })
		if n != 0 {
			t.Errorf("%s: %d records written for an ended request", b, n)
		}
	}
	// A live request goes through.
	if _, err := s.CreateTemplate(context.Background(), mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("x:1")}); err != nil {
		t.Fatal(err)
	}
}
