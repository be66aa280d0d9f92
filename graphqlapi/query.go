package graphqlapi

import (
	"context"
	"slices"
	"strings"

	"berth/gpu"
	"berth/mgmt"
	"berth/store"
)

// resolver is the root: Query and Mutation fields are its methods.
type resolver struct {
	cfg Config
}

func (r *resolver) mg() *mgmt.Service { return r.cfg.Mgmt }

func (r *resolver) podView(p store.Pod, prices mgmt.Prices) *podView {
	return &podView{p: p, mg: r.mg(), prices: prices, now: r.cfg.Clock.Now()}
}

// ---- myself ----

// userView is the operator's account.
type userView struct {
	r    *resolver
	keys []string // the account's SSH public keys (mgmt.SSHKeys)
}

func (r *resolver) Myself(ctx context.Context) (*userView, error) {
	keys, err := r.mg().SSHKeys(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	return &userView{r: r, keys: keys}, nil
}

func (u *userView) ID() string     { return "berth" }
func (u *userView) Email() *string { return nil }

// PubKey is the account's SSH keys, one per line, as RunPod keeps them
// (the same keys as REST v2's /v2/account/ssh-keys).
func (u *userView) PubKey() *string         { return ptr(strings.Join(u.keys, "\n")) }
func (u *userView) ClientBalance() *float64 { return nil }
func (u *userView) SpendLimit() *float64    { return nil }
func (u *userView) NotifyPodsStale() bool   { return false }
func (u *userView) NotifyPodsGeneral() bool { return false }
func (u *userView) NotifyLowBalance() bool  { return false }

// CurrentSpendPerHr is what the running pods cost an hour (serverless
// workers are billed per second of work, see /v1/billing/endpoints).
func (u *userView) CurrentSpendPerHr(ctx context.Context) (float64, error) {
	pods, err := u.r.mg().ListPods(ctx, mgmt.PodFilter{})
	if err != nil {
		return 0, wrap(err)
	}
	prices := u.r.mg().PricesOrZero()
	sum := 0.0
	for _, p := range pods {
		if p.DesiredStatus == store.PodRunning {
			sum += prices.PodHourly(p)
		}
	}
	return sum, nil
}

func (u *userView) Endpoints(ctx context.Context) ([]endpointView, error) {
	sn, err := u.r.mg().Snapshot(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]endpointView, 0, len(sn.Endpoints))
	p := mgmt.PrincipalFrom(ctx)
	for _, e := range sn.Endpoints {
		if p != nil && !mgmt.Visible(p, e.ID) {
			continue // a Restricted key lists the endpoints it is granted
		}
		out = append(out, endpointView{e, &sn, u.r.cfg.Workers, u.r.cfg.Models})
	}
	return out, nil
}

func (u *userView) Pods(ctx context.Context) ([]*podView, error) {
	pods, err := u.r.mg().ListPods(ctx, mgmt.PodFilter{})
	if err != nil {
		return nil, wrap(err)
	}
	prices := u.r.mg().PricesOrZero()
	out := make([]*podView, 0, len(pods))
	for _, p := range pods {
		out = append(out, u.r.podView(p, prices))
	}
	return out, nil
}

func (u *userView) NetworkVolumes(ctx context.Context) ([]volumeView, error) {
	vs, err := u.r.mg().ListVolumes(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]volumeView, 0, len(vs))
	for _, v := range vs {
		out = append(out, viewVolume(v.NetworkVolume))
	}
	return out, nil
}

// PodTemplates are all the operator's templates, endpoint-bound ones too.
func (u *userView) PodTemplates(ctx context.Context) ([]templateView, error) {
	ts, err := u.r.mg().ListTemplates(ctx, mgmt.TemplateFilter{IncludeEndpointBound: true})
	if err != nil {
		return nil, wrap(err)
	}
	return templateViews(ts), nil
}

func (u *userView) ContainerRegistryCreds(ctx context.Context) ([]*registryAuthView, error) {
	as, err := u.r.mg().ListRegistryAuths(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]*registryAuthView, 0, len(as))
	for _, a := range as {
		out = append(out, viewRegistryAuth(a))
	}
	return out, nil
}

// ---- pods ----

func (r *resolver) Pod(ctx context.Context, args struct{ Input *struct{ PodId string } }) (*podView, error) {
	if args.Input == nil {
		return nil, invalid("input", "input {podId} is required")
	}
	p, err := r.mg().GetPod(ctx, args.Input.PodId)
	if err != nil {
		return nil, wrap(err)
	}
	return r.podView(p, r.mg().PricesOrZero()), nil
}

// ---- GPUs ----

func (r *resolver) GpuTypes(args struct {
	Input *struct {
		ID  *string
		Ids *[]string
	}
}) []gpuTypeView {
	all := gpuCatalogue(r.cfg.GPUs(), r.mg().PricesOrZero())
	if args.Input == nil || (args.Input.ID == nil && args.Input.Ids == nil) {
		return all
	}
	var want []string
	if args.Input.ID != nil {
		want = append(want, gpu.TypeID(*args.Input.ID))
	}
	if args.Input.Ids != nil {
		for _, id := range *args.Input.Ids {
			want = append(want, gpu.TypeID(id))
		}
	}
	out := []gpuTypeView{}
	for _, g := range all {
		if slices.Contains(want, g.g.ID) {
			out = append(out, g)
		}
	}
	return out
}

func (r *resolver) ServerlessGpuPools() []serverlessPool {
	out := make([]serverlessPool, 0, len(gpu.Pools))
	for _, p := range gpu.Pools {
		sp := serverlessPool{ID: p.ID, GpuTypeIds: []string{}}
		for _, m := range gpu.Models {
			if m.Pool == p.ID {
				sp.GpuTypeIds = append(sp.GpuTypeIds, m.ID)
			}
		}
		out = append(out, sp)
	}
	return out
}

// DataCenters is this host, with the GPU types it has.
func (r *resolver) DataCenters() []dataCenterView {
	dc := dataCenterView{ID: mgmt.DataCenterID, Name: "Berth (this host)", Location: "local", GpuAvailability: []gpuAvailability{}}
	for _, g := range mgmt.GPUCatalogue(r.cfg.GPUs(), mgmt.Prices{}) {
		if g.Total > 0 {
			dc.GpuAvailability = append(dc.GpuAvailability, gpuAvailability{GpuTypeId: g.ID, DisplayName: displayName(g.ID), StockStatus: stockStatus(g.Stock(1))})
		}
	}
	return []dataCenterView{dc}
}

// ---- templates ----

// PodTemplates searches templates: RunPod's official ones (isRunpod: true)
// do not exist on Berth; the community's are the public templates.
type podTemplateFilter struct {
	IsRunpod     *bool
	IsPublic     *bool
	IsServerless *bool
	Category     *string
	SearchTerm   *string
}

func (r *resolver) PodTemplates(ctx context.Context, args struct{ Input *podTemplateFilter }) ([]templateView, error) {
	ts, err := r.mg().ListTemplates(ctx, mgmt.TemplateFilter{IncludeEndpointBound: true})
	if err != nil {
		return nil, wrap(err)
	}
	in := args.Input
	if in == nil {
		in = &podTemplateFilter{}
	}
	wantPublic := in.IsPublic == nil || *in.IsPublic
	out := []templateView{}
	for _, t := range ts {
		switch {
		case in.IsRunpod != nil && *in.IsRunpod != t.IsRunpod:
		case t.IsPublic != wantPublic:
		case in.IsServerless != nil && *in.IsServerless != t.IsServerless:
		case in.Category != nil && *in.Category != t.Category:
		case in.SearchTerm != nil && !matches(t, *in.SearchTerm):
		default:
			out = append(out, templateView{t})
		}
	}
	return out, nil
}

// matches is the search: term in the id, name or image, any case.
func matches(t store.Template, term string) bool {
	term = strings.ToLower(term)
	return strings.Contains(strings.ToLower(t.ID), term) || strings.Contains(strings.ToLower(t.Name), term) ||
		strings.Contains(strings.ToLower(t.ImageName), term)
}

func (r *resolver) PodTemplate(ctx context.Context, args struct{ ID string }) (*templateView, error) {
	t, err := r.mg().GetTemplate(ctx, args.ID)
	if err != nil {
		return nil, wrap(err)
	}
	return &templateView{t}, nil
}

type serverlessDiscount struct {
	DiscountFactor float64
	Type           string
	ExpirationDate *string
}

// ServerlessDiscount is null: one host has no discounts.
func (u *userView) ServerlessDiscount() *serverlessDiscount { return nil }
