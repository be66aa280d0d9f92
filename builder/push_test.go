package builder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"berth/internal/gittest"
	"berth/mgmt"
	"berth/store"
	"github.com/jonboulle/clockwork"
)

// Deliveries through the rules and the builder: a redelivery or a second
// delivery of a commit being built or built does not build again; a
// commit whose build failed does; a build that could not start leaves
// the delivery to be sent again; past the rate, 429's error. The git
// build stands in as an uploaded context's build (the same records).
func TestPushesDuplicatesAndRate(t *testing.T) {
	s, mg, f, eps := setup(t, Config{})
	repo, branch := "https://git.example/o/r.git", "main"
	e, err := mg.UpdateEndpointWith(context.Background(), eps[0].ID, mgmt.EndpointInput{},
		mgmt.EndpointOptions{Git: &mgmt.GitTrackInput{Repository: &repo, Branch: &branch}})
	if err != nil {
		t.Fatal(err)
	}
	secret := e.Git.NewWebhookSecret
	var failStart error
	var started []mgmt.GitPush
	clock := clockwork.NewFakeClock()
	p := &Pushes{Records: mg, PerMinute: 6, Clock: clock, Build: func(ctx context.Context, gp mgmt.GitPush) (store.Build, error) {
		if failStart != nil {
			return store.Build{}, failStart
		}
		started = append(started, gp)
		// One context per commit: its build has a name of its own.
		return s.Submit(ctx, gp.EndpointID, Options{}, strings.NewReader(string(tarOf(t, map[string]string{"Dockerfile": "FROM base\n", "sha": gp.Commit}))))
	}}
	push := func(id, sha string) (mgmt.GitPush, error) {
		body := fmt.Appendf(nil, `{"ref":"refs/heads/main","after":%q,"head_commit":{"id":%q,"message":"m","timestamp":"2026-11-27T15:04:05Z"}}`, sha, sha)
		out, _, err := p.Deliver(context.Background(), e.ID, mgmt.GitDelivery{Event: "push", ID: id, Body: body,
			Signatures: []string{"sha256=" + gittest.Sign(secret, body)}})
		return out, err
	}
	a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
	first, err := push("d1", a)
	if err != nil || first.Result != mgmt.GitBuild || len(started) != 1 || started[0].Commit != a || started[0].Branch != "main" || started[0].Repository != repo {
		t.Fatalf("a push: %+v %v, started %+v", first, err, started)
	}
	built := waitStatus(t, mg, store.Build{ID: mustBuildID(t, mg, e.ID), EndpointID: e.ID}, store.BuildBuilding)
	for _, c := range []struct{ name, id string }{{"the same delivery again", "d1"}, {"another delivery of the commit being built", "d2"}} {
		out, err := push(c.id, a)
		if err != nil || out.Result != mgmt.GitDuplicate || out.BuildID != built.ID || len(started) != 1 {
			t.Errorf("%s: %+v %v, want a duplicate of %s and no build", c.name, out, err, built.ID)
		}
	}
	f.finish(built.ImageName, errors.New("step failed"))
	waitStatus(t, mg, built, store.BuildFailed)
	if out, err := push("d3", a); err != nil || out.Result != mgmt.GitBuild || len(started) != 2 {
		t.Errorf("a commit whose build failed, pushed again: %+v %v, want a build", out, err)
	}
	failStart = &mgmt.Error{Kind: mgmt.Unavailable, Msg: "no builder now"}
	if _, err := push("d4", b); mgmt.KindOf(err) != mgmt.Unavailable {
		t.Errorf("a build that cannot start: %v", err)
	}
	failStart = nil
	if out, err := push("d4", b); err != nil || out.Result != mgmt.GitBuild || len(started) != 3 {
		t.Errorf("the redelivery of a delivery whose build could not start: %+v %v, want a build", out, err)
	}
	// Six deliveries so far: the seventh within the minute is refused.
	if _, err := push("d5", b); !errors.Is(err, ErrPushRate) {
		t.Errorf("over the rate: %v, want ErrPushRate", err)
	}
	clock.Advance(time.Minute)
	if out, err := push("d5", b); err != nil || out.Result != mgmt.GitDuplicate {
		t.Errorf("a minute later: %+v %v", out, err)
	}
}

func mustBuildID(t *testing.T, mg *mgmt.Service, ep string) string {
	t.Helper()
	bs, err := mg.Builds(context.Background(), ep)
	if err != nil || len(bs) == 0 {
		t.Fatalf("builds: %v %v", bs, err)
	}
	return bs[0].ID
}
