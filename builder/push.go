package builder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/time/rate"

	"berth/mgmt"
	"berth/store"
)

// PushRecords is what push to deploy needs of the management rules
// (*mgmt.Service).
type PushRecords interface {
	GitWebhook(ctx context.Context, endpointID string, d mgmt.GitDelivery) (mgmt.GitPush, error)
	NoteGitBuild(p mgmt.GitPush, buildID string) error
	ForgetGitDelivery(p mgmt.GitPush) error
}

// GitBuilder starts a build of a pushed commit (the git builds of
// *Service, adapted by the app).
type GitBuilder func(ctx context.Context, p mgmt.GitPush) (store.Build, error)

// Pushes takes webhook deliveries (push to deploy): each checked and
// decided by the rules, a build started for those that build, at most
// PerMinute deliveries per endpoint (a burst of them, then one every
// 60/PerMinute s).
type Pushes struct {
	Records   PushRecords
	Build     GitBuilder // nil: git builds are not available (503)
	PerMinute int        // [30]
	Logger    *slog.Logger
	Clock     clockwork.Clock // [real]

	mu     sync.Mutex
	limits map[string]*rate.Limiter
}

// ErrPushRate is a delivery over an endpoint's rate (HTTP 429).
var ErrPushRate = errors.New("too many webhook deliveries for this endpoint")

// Deliver takes one delivery for endpointID.
func (p *Pushes) Deliver(ctx context.Context, endpointID string, d mgmt.GitDelivery) (mgmt.GitPush, store.Build, error) {
	if !p.allow(endpointID) {
		return mgmt.GitPush{}, store.Build{}, fmt.Errorf("%w: at most %d a minute; try again later", ErrPushRate, p.perMinute())
	}
	out, err := p.Records.GitWebhook(ctx, endpointID, d)
	if err != nil || out.Result != mgmt.GitBuild {
		return out, store.Build{}, err
	}
	if p.Build == nil {
		_ = p.Records.ForgetGitDelivery(out)
		return out, store.Build{}, &mgmt.Error{Kind: mgmt.Unavailable, Msg: "git builds are not available on this Berth (docs/builds.md)"}
	}
	b, err := p.Build(ctx, out)
	if err != nil {
		if ferr := p.Records.ForgetGitDelivery(out); ferr != nil {
			p.logger().Error("forget a webhook delivery whose build did not start", "endpoint", endpointID, "err", ferr)
		}
		return out, store.Build{}, err
	}
	if err := p.Records.NoteGitBuild(out, b.ID); err != nil {
		p.logger().Error("note a webhook's build", "endpoint", endpointID, "build", b.ID, "err", err)
	}
	p.logger().Info("push to deploy: build started", "endpoint", endpointID, "build", b.ID, "ref", out.Ref(), "delivery", d.ID)
	return out, b, nil
}

func (p *Pushes) perMinute() int {
	if p.PerMinute <= 0 {
		return 30
	}
	return p.PerMinute
}

func (p *Pushes) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

// allow spends one of endpointID's deliveries. The limiters are bounded:
// past 10 000 endpoints seen, the map starts again.
func (p *Pushes) allow(endpointID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limits == nil || len(p.limits) > 10000 {
		p.limits = map[string]*rate.Limiter{}
	}
	l := p.limits[endpointID]
	if l == nil {
		n := p.perMinute()
		l = rate.NewLimiter(rate.Every(time.Minute/time.Duration(n)), n)
		p.limits[endpointID] = l
	}
	now := time.Now()
	if p.Clock != nil {
		now = p.Clock.Now()
	}
	return l.AllowN(now, 1)
}
