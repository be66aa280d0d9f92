package mgmt

import (
	"context"
	"slices"
	"sort"
	"strings"

	"berth/store"
)

// Pruning built images: an endpoint keeps the images of its last
// releases made by builds (for rollback); its builds' older images are
// removed from the daemon so builds do not fill the disk. Deciding which
// is here (BuildImagesToPrune, pure); removing them is the builder's.

// Build image retention (berth serve --build-images-kept).
const (
	DefaultBuildImagesKept = 5
	MaxBuildImagesKept     = 1000
)

// PruneInput is what the prune decision looks at.
type PruneInput struct {
	// Keep is how many images of its newest releases made by builds each
	// endpoint keeps (distinct images: a rollback to an image already
	// kept takes no second place). At least 1.
	Keep     int
	Builds   []store.Build   // every endpoint's
	Releases []store.Release // every endpoint's
	// InUse are image references something uses now: templates' images,
	// containers' images, builds in flight. A build whose local name or
	// pushed reference is in it is kept.
	InUse map[string]bool
}

// PruneImage is one image to remove (a build's local name,
// berth/<endpoint>:<tag>) and the builds that made it, marked pruned once
// it is gone.
type PruneImage struct {
	Image    string
	BuildIDs []string
}

// BuildImagesToPrune decides which build images go: every image a
// finished build of Berth's made (named berth/…), unless it is one of the
// Keep newest distinct images an endpoint's releases made by builds
// installed, or is in use, or a build not finished names it. An image
// several builds made (the same source, even of two endpoints of one
// name) is kept when any of them keeps it. Builds already pruned are not
// listed again. The answer is sorted by image.
func BuildImagesToPrune(in PruneInput) []PruneImage {
	keep := max(in.Keep, 1)
	byID := make(map[string]store.Build, len(in.Builds))
	kept := map[string]bool{}
	for _, b := range in.Builds {
		byID[b.ID] = b
		if !store.BuildDone(b.Status) || in.InUse[b.ImageName] || (b.PushedImage != "" && in.InUse[b.PushedImage]) {
			kept[b.ImageName] = true
		}
	}
	rs := slices.Clone(in.Releases)
	slices.SortFunc(rs, func(a, b store.Release) int {
		if c := strings.Compare(a.EndpointID, b.EndpointID); c != 0 {
			return c
		}
		return b.Version - a.Version // newest first
	})
	perEndpoint := map[string]map[string]bool{}
	for _, r := range rs {
		b, ok := byID[r.BuildID]
		if r.Source != ReleaseGitBuild || !ok || b.ImageName == "" {
			continue
		}
		seen := perEndpoint[r.EndpointID]
		if seen == nil {
			seen = map[string]bool{}
			perEndpoint[r.EndpointID] = seen
		}
		if len(seen) < keep && !seen[b.ImageName] {
			seen[b.ImageName] = true
			kept[b.ImageName] = true
		}
	}
	drop := map[string][]string{}
	for _, b := range in.Builds {
		if b.ImagePrunedAt != nil || !store.BuildDone(b.Status) || kept[b.ImageName] || !IsBuildImageName(b.ImageName) {
			continue
		}
		drop[b.ImageName] = append(drop[b.ImageName], b.ID)
	}
	out := make([]PruneImage, 0, len(drop))
	for img, ids := range drop {
		sort.Strings(ids)
		out = append(out, PruneImage{Image: img, BuildIDs: ids})
	}
	slices.SortFunc(out, func(a, b PruneImage) int { return strings.Compare(a.Image, b.Image) })
	return out
}

// IsBuildImageName reports whether ref is a name BuildImageName makes
// (berth/<name>:<12 hex>): only those are ever removed.
func IsBuildImageName(ref string) bool {
	repo, tag, ok := strings.Cut(ref, ":")
	name, found := strings.CutPrefix(repo, "berth/")
	if !ok || !found || name == "" || len(tag) != 12 || strings.ContainsAny(name, "/@:") {
		return false
	}
	for _, c := range tag {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// BuildImagePrune reads the store and decides (BuildImagesToPrune) which
// build images go, keeping keep per endpoint; inUse adds the references
// outside the store (containers' images, the builder's builds in flight).
// Templates' images are added here.
func (s *Service) BuildImagePrune(ctx context.Context, keep int, inUse map[string]bool) ([]PruneImage, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	in := PruneInput{Keep: keep, InUse: map[string]bool{}}
	for k := range inUse {
		in.InUse[k] = true
	}
	err := s.cfg.Store.View(func(tx *store.Tx) error {
		ts, err := all[store.Template](tx, store.Templates)
		if err != nil {
			return err
		}
		for _, t := range ts {
			in.InUse[t.ImageName] = true
		}
		if in.Builds, err = all[store.Build](tx, store.Builds); err != nil {
			return err
		}
		in.Releases, err = all[store.Release](tx, store.Releases)
		return err
	})
	if err != nil {
		return nil, err
	}
	return BuildImagesToPrune(in), nil
}

// MarkBuildImagePruned records that the image of builds ids is gone from
// the daemon: they are no longer rolled back to. Builds deleted meanwhile
// are skipped.
func (s *Service) MarkBuildImagePruned(ids []string) error {
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		now := s.now()
		var ops []store.Op
		for _, id := range ids {
			var b store.Build
			if tx.GetRaw(store.Builds, id) == nil {
				continue
			}
			if err := tx.Get(store.Builds, id, &b); err != nil {
				return err
			}
			b.ImagePrunedAt = &now
			ops = append(ops, store.Put(store.Builds, id, b))
		}
		return tx.Apply(ops...)
	})
}
