package mgmt_test

import (
	"context"
	"strings"
	"testing"

	"berth/mgmt"
	"berth/store"
)

// A restart (kill -9 included) during any unfinished phase of a build —
// TESTING among them, when a test worker may have been running — leaves
// the build FAILED saying which phase it was in; ended builds and the
// endpoint's template (the release serving) are left as they were.
func TestFailInterruptedBuilds(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t)
	tpl, err := s.CreateTemplate(ctx, mgmt.TemplateInput{Name: ptr("t"), ImageName: ptr("me/worker:1"), IsServerless: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.CreateEndpoint(ctx, mgmt.EndpointInput{Name: ptr("e"), TemplateID: &tpl.ID})
	if err != nil {
		t.Fatal(err)
	}
	// move takes a build one step on, to the phase named.
	move := func(id, to string) (err error) {
		switch to {
		case store.BuildBuilding:
			_, err = s.StartBuild(id, to)
		case store.BuildUploading:
			_, err = s.UploadingBuild(id)
		case store.BuildTesting:
			_, err = s.TestingBuild(id)
		default:
			_, _, err = s.FinishBuild(id, to, "test echo: FAILED", nil)
		}
		return err
	}
	// path is the phases a new build goes through before the restart
	// finds it in the last (none: PENDING).
	cases := []struct {
		phase string
		path  []string
		want  string // status after the restart
	}{
		{store.BuildPending, nil, store.BuildFailed},
		{store.BuildBuilding, []string{store.BuildBuilding}, store.BuildFailed},
		{store.BuildUploading, []string{store.BuildBuilding, store.BuildUploading}, store.BuildFailed},
		{store.BuildTesting, []string{store.BuildBuilding, store.BuildTesting}, store.BuildFailed},
		{store.BuildTestFailed, []string{store.BuildBuilding, store.BuildTesting, store.BuildTestFailed}, store.BuildTestFailed},
	}
	ids := map[string]string{}
	for i, c := range cases {
		b, err := s.CreateBuild(ctx, mgmt.BuildInput{EndpointID: ep.ID, ContextDigest: strings.Repeat(string(rune('a'+i)), 64)})
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range c.path {
			if err := move(b.ID, to); err != nil {
				t.Fatalf("%s: to %s: %v", c.phase, to, err)
			}
		}
		ids[c.phase] = b.ID
	}
	n, err := s.FailInterruptedBuilds()
	if err != nil || n != 4 {
		t.Fatalf("FailInterruptedBuilds = %d, %v; want 4 builds marked", n, err)
	}
	for _, c := range cases {
		b, err := s.Build(ctx, ep.ID, ids[c.phase])
		if err != nil {
			t.Fatal(err)
		}
		if b.Status != c.want {
			t.Errorf("a build %s at the restart is %s, want %s", c.phase, b.Status, c.want)
		}
		if c.want == store.BuildFailed && (!strings.Contains(b.Error, "was "+c.phase) || b.CompletedAt == nil) {
			t.Errorf("a build %s at the restart: error %q, completedAt %v", c.phase, b.Error, b.CompletedAt)
		}
	}
	got, err := s.GetTemplate(ctx, tpl.ID)
	if err != nil || got.ImageName != "me/worker:1" {
		t.Errorf("the serving template after the restart: %+v %v", got, err)
	}
	if n, err := s.FailInterruptedBuilds(); err != nil || n != 0 {
		t.Errorf("a second start marked %d builds (%v)", n, err)
	}
}
