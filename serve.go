package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"berth/app"
	"berth/apply"
	"berth/cli"
	"berth/store"
)

// serve runs the server until ctx ends (SIGINT/SIGTERM). The composition
// is package app; serve's settings — flags and environment, read in one
// place, package cli's serve command — become its Config (serveConfig).
func serve(ctx context.Context, o cli.ServeOptions) error {
	if os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(store.Procs())
	}
	cfg := serveConfig(o)
	if o.Apply != "" {
		cfg.BeforeServe = func(ctx context.Context, a *app.App) error { return applyAtStart(ctx, a, o) }
	}
	a, err := app.New(cfg)
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		stop(a)
		return err
	}
	log := o.Logger
	// systemd Type=notify: ready once the listener accepts (a no-op
	// outside systemd: NOTIFY_SOCKET is unset).
	if ok, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("sd_notify", "err", err)
	} else if ok {
		log.Info("told systemd we are ready")
	}
	if o.Ready != nil {
		o.Ready(a.Addr())
	}
	select {
	case err := <-a.Failed():
		stop(a)
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	daemon.SdNotify(false, daemon.SdNotifyStopping)
	return stop(a)
}

// applyAtStart makes serve's --apply file true before Berth answers its
// first request, so a CI script that waits for an answer finds the records
// — and the images its builds make: the start waits for them, and a
// failed build fails it.
func applyAtStart(ctx context.Context, a *app.App, o cli.ServeOptions) error {
	f, err := os.Open(o.Apply)
	if err != nil {
		return fmt.Errorf("--apply: %w", err)
	}
	defer f.Close()
	file, err := apply.Parse(f, nil)
	if err != nil {
		return fmt.Errorf("--apply %s: %w", o.Apply, err)
	}
	opts := apply.Options{Prune: o.ApplyPrune, Builder: a.Builds(), Contexts: map[string]apply.Context{},
		Log: func(ep, line string) { o.Logger.Info("apply build", "endpoint", ep, "line", line) }}
	defer func() {
		for _, c := range opts.Contexts {
			c.Remove()
		}
	}()
	for _, e := range file.Endpoints {
		if e.Build == nil || e.Build.Context == nil {
			continue
		}
		c, err := apply.PackDir(apply.ContextDir(filepath.Dir(o.Apply), *e.Build.Context), e.Build.Dockerfile)
		if err != nil {
			return fmt.Errorf("--apply %s: endpoint %s: %w", o.Apply, *e.Name, err)
		}
		opts.Contexts[*e.Name] = c
	}
	stopExtending := extendStartTimeout(o.Logger)
	res, err := apply.Apply(ctx, a.Mgmt(), file, opts)
	stopExtending()
	for _, act := range res.Actions {
		o.Logger.Info("apply", "action", act.String())
	}
	if err != nil {
		return fmt.Errorf("--apply %s: %w", o.Apply, err)
	}
	return nil
}

// extendStartTimeout tells systemd, while --apply's builds run, that the
// start is still making progress (EXTEND_TIMEOUT_USEC, systemd ≥ 236): a
// first build can take longer than the unit's start timeout (90 s by
// default), which would otherwise kill a start that is working. Each
// message gives two minutes more; they stop with the apply. A no-op
// outside systemd.
func extendStartTimeout(log *slog.Logger) (stop func()) {
	const every, extend = time.Minute, 2 * time.Minute
	notify := func() {
		if _, err := daemon.SdNotify(false, fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", extend.Microseconds())); err != nil {
			log.Warn("sd_notify", "err", err)
		}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		notify()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				notify()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// stop gives requests in flight 10 s to finish.
func stop(a *app.App) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.Stop(ctx)
}

// serveConfig is serve's settings as the composition's Config. It reads
// nothing itself: every flag and variable is cli.ServeOptions'.
func serveConfig(o cli.ServeOptions) app.Config {
	c := app.Config{
		DataDir: o.Data, Addr: o.Addr, Logger: o.Logger, Version: version,
		APIKey: o.APIKey, KeyNotice: o.KeyNotice,
		RateLimits: o.RateLimits, WebhookAllow: o.WebhookAllow,
	}
	c.Queue.WorkerTimeout, c.Queue.ReconcileGrace, c.Queue.MaxAttempts = o.WorkerTimeout, o.ReconcileGrace, o.MaxAttempts
	c.HTTP.KeyRequestsPer10s = o.KeyRateLimit // ServeOptions' 0 is none, httpapi's the default
	if o.KeyRateLimit <= 0 || !o.RateLimits { // --rate-limits off: benchmarks and test rigs, no per-key limit either
		c.HTTP.KeyRequestsPer10s = -1
	}
	// runtime.Config's zero means the default and negative never;
	// ServeOptions' zero means never.
	c.Runtime.FlashMaxFrozen, c.Runtime.FlashMinMemAvailable = o.FlashMaxFrozen, int64(o.FlashMinMemMiB)<<20
	c.Runtime.VCPUsPerGPU, c.Runtime.MemoryGiBPerGPU = o.WorkerVCPUsPerGPU, o.WorkerMemoryGiBPerGPU
	c.Builds.MaxContextBytes = int64(o.BuildMaxContextMiB) << 20
	c.Builds.StepTimeout, c.Builds.TotalTimeout, c.Builds.MaxConcurrent = o.BuildStepTimeout, o.BuildTimeout, o.BuildConcurrency
	c.Builds.Registry, c.Builds.RegistryAuth = o.Registry, o.RegistryAuth
	c.Builds.ImagesKept = o.BuildImagesKept
	c.BuildkitAddr = o.BuildkitAddr
	if c.Runtime.FlashMaxFrozen <= 0 {
		c.Runtime.FlashMaxFrozen = -1
	}
	if c.Runtime.FlashMinMemAvailable <= 0 {
		c.Runtime.FlashMinMemAvailable = -1
	}
	if o.Runtime == "kubernetes" {
		c.Backend = app.OnKubernetes(app.Kubernetes{Kubeconfig: o.Kubeconfig, Namespace: o.Namespace, AdvertiseURL: o.AdvertiseURL, WorkerAddr: o.WorkerAddr,
			StorageClass: o.StorageClass, VolumeAccessMode: o.VolumeAccessMode, ServiceType: o.ServiceType,
			ModelsImage: o.ModelsImage, ModelsStorageClass: o.ModelsStorageClass, ModelsAccessMode: o.ModelsAccessMode,
			SelfPod: o.SelfPod, SelfNamespace: o.SelfNamespace, PodTemplate: o.KubePodTemplate})
	}
	c.Models = app.Models{Endpoint: o.HFEndpoint, Token: o.HFToken, MaxBytes: int64(o.ModelsMaxGB * 1e9),
		Slots: o.ModelsSlots, BytesPerSecond: int64(o.ModelsBandwidth * 1e6)}
	c.LB.Domain, c.LB.Timeout = o.LBDomain, o.LBTimeout
	return c
}
