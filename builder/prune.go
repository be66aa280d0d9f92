package builder

import (
	"context"
	"fmt"
	"time"
)

// ImageRemover removes a build's image from the daemon (runtime/docker
// implements it).
type ImageRemover interface {
	// RemoveImage removes the name ref: the image goes with its last
	// name. An image a container uses is refused (an error); a name that
	// is not there is (false, nil).
	RemoveImage(ctx context.Context, ref string) (bool, error)
}

// Prune results, for Config.OnPrune.
const (
	PruneRemoved = "removed"
	PruneFailed  = "failed"
)

// hold keeps image from being pruned while a build of it runs: from the
// builder's look for it (reused when present) until its release names it
// in a template. It waits for a prune in progress, so the look sees what
// that prune left.
func (s *Service) hold(image string) (release func()) {
	s.pruneMu.Lock()
	s.mu.Lock()
	s.inflight[image]++
	s.mu.Unlock()
	s.pruneMu.Unlock()
	return func() {
		s.mu.Lock()
		if s.inflight[image]--; s.inflight[image] <= 0 {
			delete(s.inflight, image)
		}
		s.mu.Unlock()
	}
}

// PruneImages removes the images of builds no endpoint keeps
// (mgmt.BuildImagesToPrune: each endpoint keeps its Config.ImagesKept
// newest releases' images; nothing a template, a container or a build in
// flight names goes) and marks their builds pruned. With a registry only
// the daemon's copy goes (its local name and the pushed name's tag).
// Every removal and failure is logged and told to OnPrune; it returns how
// many images were removed. Without an ImageRemover it does nothing.
func (s *Service) PruneImages(ctx context.Context) (int, error) {
	if s.cfg.Remover == nil {
		return 0, nil
	}
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	inUse := map[string]bool{}
	if s.cfg.InUseImages != nil {
		imgs, err := s.cfg.InUseImages(ctx)
		if err != nil {
			return 0, fmt.Errorf("prune build images: list the images containers use: %w", err)
		}
		for _, i := range imgs {
			inUse[i] = true
		}
	}
	s.mu.Lock()
	for i := range s.inflight {
		inUse[i] = true
	}
	s.mu.Unlock()
	plan, err := s.cfg.Records.BuildImagePrune(ctx, s.cfg.ImagesKept, inUse)
	if err != nil {
		return 0, fmt.Errorf("prune build images: %w", err)
	}
	removed, failed := 0, 0
	for _, p := range plan {
		refs := []string{p.Image}
		if s.cfg.Registry != "" {
			refs = append(refs, RegistryName(s.cfg.Registry, p.Image))
		}
		gone, any := true, false
		for _, ref := range refs {
			ok, err := s.cfg.Remover.RemoveImage(ctx, ref)
			if err != nil {
				gone = false
				failed++
				s.log.Warn("build image not pruned", "image", ref, "builds", p.BuildIDs, "err", err)
				s.onPrune(PruneFailed)
				break
			}
			any = any || ok
		}
		if !gone {
			continue
		}
		if err := s.cfg.Records.MarkBuildImagePruned(p.BuildIDs); err != nil {
			return removed, fmt.Errorf("prune build images: record %s pruned: %w", p.Image, err)
		}
		if any {
			removed++
			s.log.Info("build image pruned", "image", p.Image, "builds", p.BuildIDs, "kept", s.cfg.ImagesKept)
			s.onPrune(PruneRemoved)
		} else {
			s.log.Debug("build image already gone", "image", p.Image, "builds", p.BuildIDs)
		}
	}
	if failed > 0 {
		return removed, fmt.Errorf("prune build images: %d of %d could not be removed (logged above)", failed, len(plan))
	}
	return removed, nil
}

func (s *Service) onPrune(result string) {
	if s.cfg.OnPrune != nil {
		s.cfg.OnPrune(result)
	}
}

// pruneAfterBuild prunes once a build has released: what it replaced may
// now be past the kept releases. It runs beside the next builds.
func (s *Service) pruneAfterBuild() {
	if s.cfg.Remover == nil {
		return
	}
	s.wg.Add(1) // called from a running build: the group is not at zero
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := s.PruneImages(ctx); err != nil {
			s.log.Error("prune build images after a build", "err", err)
		}
	}()
}
