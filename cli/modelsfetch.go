package cli

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"berth/hfcache"
)

// modelsFetchCommand is the program of the Kubernetes runtime's model
// download Job (runtime/kube, docs/models.md): it downloads one model into
// the cache folder mounted from the models claim, as `berth serve` does
// into DATA/models/hub (package hfcache: resume, sha256, retries with
// back-off), and writes its progress as lines (hfcache.LinePrefix) on
// stdout, its Pod's log, which Berth reads. It exits 0 once the model is
// complete. The Hub token is HF_TOKEN, from a Secret (never an argument).
// Hidden: Berth runs it, people do not.
func modelsFetchCommand(a *app) *cobra.Command {
	var dir, hub, ref string
	var every, minBackoff time.Duration
	var slots int
	var bandwidth float64
	cmd := &cobra.Command{Use: "models-fetch", Hidden: true, Args: exactArgs(0, "no arguments"),
		Short: "Download one model into a hub cache folder (the Kubernetes download Job's program)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := hfcache.ParseRef(ref)
			if err != nil {
				return usageErr("--ref: %v", err)
			}
			if dir == "" || every <= 0 || slots < 1 {
				return usageErr("--dir is required; --every and --slots must be positive")
			}
			token := a.o.Getenv("HF_TOKEN")
			c, err := hfcache.New(hfcache.Config{Dir: dir, Endpoint: hub, Token: func() string { return token },
				Slots: slots, BytesPerSecond: int64(bandwidth * 1e6), MinBackoff: minBackoff})
			if err != nil {
				return err
			}
			// SIGTERM (the Job deleted): stop, the partial files stay for
			// the next Pod to resume.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			defer c.Close()
			c.Sync([]hfcache.Ref{r})
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				p, _ := c.Status(r)
				if _, err := a.o.Stdout.Write(p.Line()); err != nil {
					return err
				}
				if p.State == hfcache.Ready {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("stopped: %w", context.Cause(ctx))
				case <-t.C:
				}
			}
		}}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the hub cache folder (HF_HUB_CACHE)")
	f.StringVar(&hub, "hub", hfcache.DefaultEndpoint, "the Hub's base URL")
	f.StringVar(&ref, "ref", "", "the model reference, https://huggingface.co/ORG/NAME[:REF]")
	f.DurationVar(&every, "every", time.Second, "how often progress is written")
	f.DurationVar(&minBackoff, "min-backoff", 0, "the first wait after a failed download (0: hfcache's)")
	f.IntVar(&slots, "slots", 4, "files downloading at once")
	f.Float64Var(&bandwidth, "bandwidth", 0, "MB/s (0: unbounded)")
	return cmd
}
