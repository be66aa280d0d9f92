package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"berth/builder"
	"berth/mgmt"
	"berth/queue"
	"berth/store"
)

func hostCommands(a *app) []*cobra.Command {
	gpus := &cobra.Command{Use: "gpus", Short: "List this host's GPUs and what holds them", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var items []any
			if err := a.client().Do(cmd.Context(), http.MethodGet, "/v1/gpus", nil, &items); err != nil {
				return err
			}
			return a.printer().List(items, []column{{header: "INDEX", path: "index"}, {header: "NAME", path: "name"},
				{header: "TYPE", path: "gpuTypeId"}, {header: "MEMORY_MIB", path: "memoryInMiB"}, {header: "HOLDER", path: "holder"},
				{header: "UUID", path: "uuid"}})
		}}

	var baseURL string
	workerEnv := &cobra.Command{Use: "worker-env ENDPOINT_ID|NAME", Short: "Print export lines for a worker run outside Docker",
		Args: exactArgs(1, "ENDPOINT_ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := a.endpointID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			path := "/v1/endpoints/" + url.PathEscape(ep) + "/worker-env"
			if baseURL != "" {
				path += "?baseUrl=" + url.QueryEscape(baseURL)
			}
			var env map[string]string
			if err := a.client().Do(cmd.Context(), http.MethodGet, path, nil, &env); err != nil {
				return err
			}
			if a.asJSON || a.output == "json" {
				return a.printer().JSON(env)
			}
			keys := make([]string, 0, len(env))
			for k := range env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(a.o.Stdout, "export %s='%s'\n", k, strings.ReplaceAll(env[k], "'", `'\''`))
			}
			return nil
		}}
	workerEnv.Flags().StringVar(&baseURL, "base-url", "", "the address the worker reaches Berth at [--url]")

	version := &cobra.Command{Use: "version", Short: "Print berth's version", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.asJSON || a.output == "json" {
				return a.printer().JSON(map[string]string{"version": a.o.Version})
			}
			_, err := fmt.Fprintln(a.o.Stdout, "berth", a.o.Version)
			return err
		}}

	var dataDir string
	backup := &cobra.Command{Use: "backup FILE", Short: "Save a consistent copy of Berth's database",
		Long: `Save a consistent copy of Berth's database to FILE.

By default the running Berth at --url writes it from one read transaction
(jobs keep flowing meanwhile). With --data DIR the database in DIR is copied
directly, for a Berth that is stopped. FILE is written beside itself and
renamed, so it is never half written. Restore: stop Berth, put the copy at
DATA/berth.db, start Berth.`,
		Args: exactArgs(1, "FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var n int64
			var err error
			if dataDir != "" {
				n, err = backupOffline(dataDir, args[0])
			} else {
				n, err = backupOnline(cmd.Context(), a, args[0])
			}
			if err != nil {
				return err
			}
			if a.asJSON || a.output == "json" {
				return a.printer().JSON(map[string]any{"file": args[0], "bytes": n})
			}
			fmt.Fprintf(a.o.Stderr, "wrote %s (%d bytes)\n", args[0], n)
			return nil
		}}
	backup.Flags().StringVar(&dataDir, "data", "", "copy the database in this data directory instead (Berth stopped)")

	var checkData string
	var repair bool
	check := &cobra.Command{Use: "check", Short: "Check berth.db (every page, every record's checksum); --repair writes a sound copy (Berth stopped)",
		Long: `Check DATA/berth.db as 'berth serve' does at every start (both header pages, the
free-page list, bbolt's page-tree check), then verify every record's checksum and
decode it. Run it with 'berth serve' stopped. Exit 0 and "PATH: ok", or exit 1
and the problems found.

With --repair, a damaged file is replaced by a copy holding every record that
verifies (a job is kept or left out whole): the records left out are written,
with their problem and bytes, to PATH.damaged-TIME.jsonl, and the damaged file
is kept as PATH.before-repair-TIME. Records on pages the page tree no longer
reaches cannot be found: compare with a backup ('berth backup'). Exit 0 once
the copy is in place and passes the check.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := filepath.Join(checkData, "berth.db")
			err := store.Check(path)
			if errors.Is(err, store.ErrLocked) {
				return fmt.Errorf("%w (stop 'berth serve' first)", err)
			}
			if err != nil && repair && errors.Is(err, store.ErrCorrupt) {
				fmt.Fprintln(a.o.Stderr, err)
				return repairFile(a, path)
			}
			if err != nil {
				if errors.Is(err, store.ErrCorrupt) {
					return fmt.Errorf("%w\n'berth check --repair' writes a copy without the damaged records (the file is kept); or restore a backup", err)
				}
				return err
			}
			if a.asJSON || a.output == "json" {
				return a.printer().JSON(map[string]any{"file": path, "ok": true})
			}
			_, err = fmt.Fprintln(a.o.Stdout, path+": ok")
			return err
		}}
	check.Flags().StringVar(&checkData, "data", envOr(a, "BERTH_DATA", "./berth-data"), "data directory [BERTH_DATA]")
	check.Flags().BoolVar(&repair, "repair", false, "replace a damaged file by a copy without its damaged records (the file and those records are kept aside)")

	return []*cobra.Command{gpus, workerEnv, version, backup, check, serveCommand(a)}
}

// repairFile replaces the damaged database at path by store.Repair's copy,
// keeping the damaged file and the records left out beside it.
func repairFile(a *app, path string) error {
	stamp := time.Now().UTC().Format("20060102T150405Z")
	asidePath := path + ".damaged-" + stamp + ".jsonl"
	before := path + ".before-repair-" + stamp
	aside, err := os.OpenFile(asidePath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	rep, err := store.Repair(path, path+".repaired", aside)
	if cerr := aside.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot repair %s: %w; restore a backup instead: stop Berth, put the copy ('berth backup') at %s", path, err, path)
	}
	if err := os.Rename(path, before); err != nil {
		return err
	}
	if err := os.Rename(path+".repaired", path); err != nil {
		return fmt.Errorf("%w (the damaged file is now %s; the copy is %s.repaired)", err, before, path)
	}
	os.Remove(path + ".clean") // the marker described the damaged file
	if a.asJSON || a.output == "json" {
		return a.printer().JSON(map[string]any{"file": path, "repaired": true, "kept": rep.Kept, "setAside": rep.SetAside,
			"setAsideFile": asidePath, "damagedFile": before, "lost": rep.Lost})
	}
	fmt.Fprintf(a.o.Stdout, "%s: repaired: %d records kept, %d set aside in %s; the damaged file is kept as %s\n", path, rep.Kept, rep.SetAside, asidePath, before)
	for _, l := range rep.Lost {
		fmt.Fprintf(a.o.Stdout, "  lost: %s (compare with a backup)\n", l)
	}
	return nil
}

func envOr(a *app, name, def string) string {
	if v := a.o.Getenv(name); v != "" {
		return v
	}
	return def
}

func backupOnline(ctx context.Context, a *app, file string) (int64, error) {
	resp, err := a.client().Send(ctx, http.MethodGet, "/v1/backup", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return store.WriteFileAtomic(file, func(w io.Writer) (int64, error) {
		n, err := io.Copy(w, resp.Body)
		if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
			err = fmt.Errorf("backup cut short: %d of %d bytes", n, resp.ContentLength)
		}
		return n, err
	})
}

func backupOffline(dataDir, file string) (int64, error) {
	path := filepath.Join(dataDir, "berth.db")
	if _, err := os.Stat(path); err != nil {
		return 0, usageErr("--data: %v", err)
	}
	db, err := store.Open(path, store.Options{})
	if err != nil {
		return 0, fmt.Errorf("%w (is Berth running? then leave out --data)", err)
	}
	defer db.Close()
	return db.BackupFile(file)
}

// NewLogger builds the server's logger from --log-format and --log-level.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr("--log-level must be debug, info, warn or error, got %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErr("--log-format must be text or json, got %q", format)
}

func serveCommand(a *app) *cobra.Command {
	env := func(name, def string) string {
		if v := a.o.Getenv(name); v != "" {
			return v
		}
		return def
	}
	envDur := func(name string, def time.Duration) time.Duration {
		if d, err := time.ParseDuration(a.o.Getenv(name)); err == nil {
			return d
		}
		return def
	}
	envInt := func(name string, def int) int {
		if n, err := strconv.Atoi(a.o.Getenv(name)); err == nil {
			return n
		}
		return def
	}
	envFloat := func(name string, def float64) float64 {
		if f, err := strconv.ParseFloat(a.o.Getenv(name), 64); err == nil {
			return f
		}
		return def
	}
	envBool := func(name string, def bool) bool {
		if b, err := strconv.ParseBool(a.o.Getenv(name)); err == nil {
			return b
		}
		return def
	}
	var o ServeOptions
	var limits, logFormat, logLevel, webhookAllow string
	cmd := &cobra.Command{Use: "serve", Short: "Run the Berth server", Args: exactArgs(0, "no arguments"),
		Long: `Run the Berth server: RunPod's APIs on --addr, jobs in DATA/berth.db,
worker and pod containers through the Docker daemon (DOCKER_HOST or the
default socket). Every flag has an environment variable (in brackets).
Variables with no flag: BERTH_API_KEY (the operator's key), BERTH_LB_DOMAIN
(default lb.localhost), BERTH_LB_TIMEOUT (a positive Go duration, default
5m30s), POD_NAME and POD_NAMESPACE (kubernetes: Berth's own Pod).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limits != "on" && limits != "off" {
				return usageErr("--rate-limits must be on or off, got %q", limits)
			}
			o.RateLimits = limits == "on"
			switch o.Runtime {
			case "docker":
			case "kubernetes":
				if o.AdvertiseURL == "" {
					return usageErr("--runtime kubernetes needs --advertise-url: the address at which workers in the cluster reach Berth (e.g. http://berth.berth.svc:8080)")
				}
			default:
				return usageErr("--runtime must be docker or kubernetes, got %q", o.Runtime)
			}
			if o.WorkerAddr != "" {
				if o.Runtime != "kubernetes" {
					return usageErr("--worker-addr is for --runtime kubernetes (on Docker, containers reach the worker protocol on the bridge's gateway)")
				}
				if _, _, err := net.SplitHostPort(o.WorkerAddr); err != nil {
					return usageErr("--worker-addr must be host:port (e.g. 0.0.0.0:8081), got %q", o.WorkerAddr)
				}
			}
			switch o.VolumeAccessMode {
			case "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", "ReadOnlyMany":
			default:
				return usageErr("--volume-access-mode must be ReadWriteMany, ReadWriteOnce, ReadWriteOncePod or ReadOnlyMany, got %q", o.VolumeAccessMode)
			}
			switch o.ModelsAccessMode {
			case "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod":
			default:
				return usageErr("--models-access-mode must be ReadWriteMany, ReadWriteOnce or ReadWriteOncePod (the download Job writes the claim), got %q", o.ModelsAccessMode)
			}
			switch o.ServiceType {
			case "NodePort", "LoadBalancer", "ClusterIP":
			default:
				return usageErr("--service-type must be NodePort, LoadBalancer or ClusterIP, got %q", o.ServiceType)
			}
			if o.BuildMaxContextMiB < 1 || o.BuildConcurrency < 1 || o.BuildStepTimeout <= 0 || o.BuildTimeout <= 0 {
				return usageErr("--build-max-context, --build-concurrency, --build-step-timeout and --build-timeout must be positive")
			}
			if o.BuildImagesKept < 1 || o.BuildImagesKept > mgmt.MaxBuildImagesKept {
				return usageErr("--build-images-kept must be 1–%d (the images of each endpoint's last releases made by builds that stay for rollback), got %d", mgmt.MaxBuildImagesKept, o.BuildImagesKept)
			}
			if o.Registry != "" {
				if err := builder.CheckRegistry(o.Registry); err != nil {
					return usageErr("--registry: %v", err)
				}
			} else if o.RegistryAuth != "" {
				return usageErr("--registry-auth is the login of --registry: give --registry too")
			}
			if o.BuildkitAddr != "" && !strings.HasPrefix(o.BuildkitAddr, "unix://") && !strings.HasPrefix(o.BuildkitAddr, "tcp://") {
				return usageErr("--buildkit-addr must be unix:///PATH or tcp://HOST:PORT, got %q", o.BuildkitAddr)
			}
			if o.WorkerVCPUsPerGPU < 0 || o.WorkerMemoryGiBPerGPU < 0 {
				return usageErr("--worker-vcpus-per-gpu and --worker-memory-per-gpu must be 0 (the default rule) or more, got %d and %d", o.WorkerVCPUsPerGPU, o.WorkerMemoryGiBPerGPU)
			}
			if o.ModelsMaxGB < 0 || o.ModelsSlots < 1 || o.ModelsSlots > 64 || o.ModelsBandwidth < 0 {
				return usageErr("--models-max-gb and --models-bandwidth must be 0 or more and --models-slots 1–64, got %g, %g and %d", o.ModelsMaxGB, o.ModelsBandwidth, o.ModelsSlots)
			}
			if u, err := url.Parse(o.HFEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageErr("--hf-endpoint must be an http(s) URL such as https://huggingface.co, got %q", o.HFEndpoint)
			}
			o.HFToken = env("BERTH_HF_TOKEN", a.o.Getenv("HF_TOKEN"))
			// The settings with no flag: the key, the Pod's own name (the
			// downward API's) and the load balancer's.
			o.APIKey = a.o.Getenv("BERTH_API_KEY")
			o.SelfPod, o.SelfNamespace = a.o.Getenv("POD_NAME"), a.o.Getenv("POD_NAMESPACE")
			o.LBDomain = a.o.Getenv("BERTH_LB_DOMAIN")
			if v := a.o.Getenv("BERTH_LB_TIMEOUT"); v != "" {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return usageErr("BERTH_LB_TIMEOUT must be a positive Go duration such as 5m30s, got %q", v)
				}
				o.LBTimeout = d
			}
			allow, err := queue.ParseWebhookAllow(webhookAllow)
			if err != nil {
				return usageErr("%v", err)
			}
			o.WebhookAllow = allow
			log, err := NewLogger(a.o.Stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			o.Logger, o.KeyNotice = log, a.o.Stderr
			if a.o.Serve == nil {
				return fmt.Errorf("serve: not available in this build")
			}
			return a.o.Serve(cmd.Context(), o)
		}}
	f := cmd.Flags()
	f.StringVar(&o.Addr, "addr", env("BERTH_ADDR", "127.0.0.1:8080"), "listen address [BERTH_ADDR]")
	f.StringVar(&o.Data, "data", env("BERTH_DATA", "./berth-data"), "data directory [BERTH_DATA]")
	f.StringVar(&limits, "rate-limits", env("BERTH_RATE_LIMITS", "on"), "the spec's rate limits: on or off [BERTH_RATE_LIMITS]")
	f.IntVar(&o.KeyRateLimit, "key-rate-limit", envInt("BERTH_KEY_RATE_LIMIT", 5000), "requests each API key may make in any 10 seconds, across all endpoints and routes (worker routes not counted); 0 none; off with --rate-limits off [BERTH_KEY_RATE_LIMIT]")
	f.DurationVar(&o.WorkerTimeout, "worker-timeout", envDur("BERTH_WORKER_TIMEOUT", 60*time.Second), "a worker silent this long is lost and its jobs requeued [BERTH_WORKER_TIMEOUT]")
	f.DurationVar(&o.ReconcileGrace, "reconcile-grace", envDur("BERTH_RECONCILE_GRACE", 30*time.Second), "a job a worker's pings stop reporting this long after it took it is requeued [BERTH_RECONCILE_GRACE]")
	f.IntVar(&o.MaxAttempts, "max-attempts", envInt("BERTH_MAX_ATTEMPTS", 3), "times a job is handed to workers that are lost before it fails [BERTH_MAX_ATTEMPTS]")
	f.StringVar(&webhookAllow, "webhook-allow", env("BERTH_WEBHOOK_ALLOW", ""), "comma-separated CIDRs, addresses or host names webhooks may reach although the default policy forbids them (loopback, link-local, metadata) [BERTH_WEBHOOK_ALLOW]")
	f.DurationVar(&o.FlashMaxFrozen, "flashboot-max-frozen", envDur("BERTH_FLASHBOOT_MAX_FROZEN", time.Hour), "flashboot: a frozen (paused) idle worker is stopped after this long; 0 never [BERTH_FLASHBOOT_MAX_FROZEN]")
	f.IntVar(&o.FlashMinMemMiB, "flashboot-min-memory", envInt("BERTH_FLASHBOOT_MIN_MEMORY", 512), "flashboot: while the host has less than this many MiB available (MemAvailable), frozen workers are stopped, least recently used first; 0 never [BERTH_FLASHBOOT_MIN_MEMORY]")
	f.IntVar(&o.WorkerVCPUsPerGPU, "worker-vcpus-per-gpu", envInt("BERTH_WORKER_VCPUS_PER_GPU", 0), "vCPUs a GPU worker requests per GPU (Kubernetes schedules by it); 0: 2 [BERTH_WORKER_VCPUS_PER_GPU]")
	f.IntVar(&o.WorkerMemoryGiBPerGPU, "worker-memory-per-gpu", envInt("BERTH_WORKER_MEMORY_PER_GPU", 0), "GiB of memory a GPU worker requests per GPU (Kubernetes schedules by it; /dev/shm is half a worker's memory); 0: half the GPU's memory, at least 8 [BERTH_WORKER_MEMORY_PER_GPU]")
	f.StringVar(&o.HFEndpoint, "hf-endpoint", env("BERTH_HF_ENDPOINT", env("HF_ENDPOINT", "https://huggingface.co")), "the Hugging Face Hub (or mirror) endpoints' model references are downloaded from; the token is BERTH_HF_TOKEN or HF_TOKEN [BERTH_HF_ENDPOINT, HF_ENDPOINT]")
	f.Float64Var(&o.ModelsMaxGB, "models-max-gb", envFloat("BERTH_MODELS_MAX_GB", 0), "cap of the model cache (DATA/models) in GB; models no endpoint names are evicted, least recently used first; 0: no cap [BERTH_MODELS_MAX_GB]")
	f.IntVar(&o.ModelsSlots, "models-slots", envInt("BERTH_MODELS_SLOTS", 4), "model files downloading at once, over all models [BERTH_MODELS_SLOTS]")
	f.Float64Var(&o.ModelsBandwidth, "models-bandwidth", envFloat("BERTH_MODELS_BANDWIDTH", 0), "MB/s all model downloads may use together; 0: unbounded [BERTH_MODELS_BANDWIDTH]")
	f.StringVar(&o.Runtime, "runtime", env("BERTH_RUNTIME", "docker"), "where workers and pods run: docker (containers of the local daemon) or kubernetes (Pods of --namespace) [BERTH_RUNTIME]")
	f.StringVar(&o.Kubeconfig, "kubeconfig", env("KUBECONFIG", ""), "kubernetes: the kubeconfig file; empty: the in-cluster service account when Berth runs in a Pod, else ~/.kube/config [KUBECONFIG]")
	f.StringVar(&o.Namespace, "namespace", env("BERTH_NAMESPACE", ""), "kubernetes: the namespace of Berth's Pods, Services, Secrets and volume claims; empty: the kubeconfig's (in a Pod: its own) [BERTH_NAMESPACE]")
	f.StringVar(&o.AdvertiseURL, "advertise-url", env("BERTH_ADVERTISE_URL", ""), "kubernetes: where workers in the cluster reach Berth's worker protocol, e.g. http://berth.berth.svc:8080 [BERTH_ADVERTISE_URL]")
	f.StringVar(&o.WorkerAddr, "worker-addr", env("BERTH_WORKER_ADDR", ""), "kubernetes: a second listen address serving only the worker protocol (job-take, job-done, ping …), for the Service worker Pods reach, e.g. 0.0.0.0:8081; empty: workers use --addr [BERTH_WORKER_ADDR]")
	f.StringVar(&o.StorageClass, "storage-class", env("BERTH_STORAGE_CLASS", ""), "kubernetes: storage class of volume claims; empty: the cluster's default [BERTH_STORAGE_CLASS]")
	f.StringVar(&o.VolumeAccessMode, "volume-access-mode", env("BERTH_VOLUME_ACCESS_MODE", "ReadWriteMany"), "kubernetes: access mode of a network volume's claim (shared by an endpoint's workers) [BERTH_VOLUME_ACCESS_MODE]")
	f.StringVar(&o.ServiceType, "service-type", env("BERTH_SERVICE_TYPE", "NodePort"), "kubernetes: Service type of a pod's ports: NodePort, LoadBalancer or ClusterIP [BERTH_SERVICE_TYPE]")
	f.StringVar(&o.KubePodTemplate, "kube-pod-template", env("BERTH_KUBE_POD_TEMPLATE", ""), "kubernetes: a Pod template file (YAML or JSON) merged into every worker and pod Pod: runtimeClassName, priorityClassName, tolerations, nodeSelector, affinity, labels, annotations, securityContext, imagePullPolicy, volumes (docs/kubernetes.md) [BERTH_KUBE_POD_TEMPLATE]")
	f.StringVar(&o.ModelsImage, "models-image", env("BERTH_MODELS_IMAGE", ""), "kubernetes: the image of the model download Jobs (Berth's own: they run berth models-fetch); empty: Berth's own container's when it runs in the cluster [BERTH_MODELS_IMAGE]")
	f.StringVar(&o.ModelsStorageClass, "models-storage-class", env("BERTH_MODELS_STORAGE_CLASS", ""), "kubernetes: storage class of the model cache's claim berth-models (sized by --models-max-gb, 100 GB without); empty: --storage-class's [BERTH_MODELS_STORAGE_CLASS]")
	f.StringVar(&o.ModelsAccessMode, "models-access-mode", env("BERTH_MODELS_ACCESS_MODE", "ReadWriteMany"), "kubernetes: access mode of the model cache's claim (the download Job writes it, workers on any node read it); ReadWriteOnce on one-node clusters or with workers pinned to one node (docs/models.md) [BERTH_MODELS_ACCESS_MODE]")
	f.IntVar(&o.BuildMaxContextMiB, "build-max-context", envInt("BERTH_BUILD_MAX_CONTEXT", 256), "builds: the largest build context (source upload) in MiB; larger uploads get 413 [BERTH_BUILD_MAX_CONTEXT]")
	f.DurationVar(&o.BuildStepTimeout, "build-step-timeout", envDur("BERTH_BUILD_STEP_TIMEOUT", 30*time.Minute), "builds: the image build step's time limit (RunPod's 30 min) [BERTH_BUILD_STEP_TIMEOUT]")
	f.DurationVar(&o.BuildTimeout, "build-timeout", envDur("BERTH_BUILD_TIMEOUT", 160*time.Minute), "builds: a build's time limit from its start to its release (RunPod's 160 min) [BERTH_BUILD_TIMEOUT]")
	f.IntVar(&o.BuildConcurrency, "build-concurrency", envInt("BERTH_BUILD_CONCURRENCY", 2), "builds: how many run at once (one per endpoint); the others wait PENDING [BERTH_BUILD_CONCURRENCY]")
	f.IntVar(&o.BuildImagesKept, "build-images-kept", envInt("BERTH_BUILD_IMAGES_KEPT", mgmt.DefaultBuildImagesKept), "builds: the images of each endpoint's last N releases made by builds stay in the daemon for rollback (1–1000); older build images are removed, never one a template, a container or a running build uses [BERTH_BUILD_IMAGES_KEPT]")
	f.StringVar(&o.Registry, "registry", env("BERTH_REGISTRY", ""), "builds: a registry HOST[/PREFIX] every completed build is pushed to (as HOST/PREFIX/<endpoint>:<tag>); releases then run the pushed image by digest. Required for builds on --runtime kubernetes [BERTH_REGISTRY]")
	f.StringVar(&o.RegistryAuth, "registry-auth", env("BERTH_REGISTRY_AUTH", ""), "builds: the name (or id) of the stored container registry auth (`berth registry create`) --registry is pushed to and pulled from with; empty: anonymous [BERTH_REGISTRY_AUTH]")
	f.StringVar(&o.BuildkitAddr, "buildkit-addr", env("BERTH_BUILDKIT_ADDR", ""), "builds: a BuildKit daemon to build on (unix:///run/buildkit/buildkitd.sock, tcp://host:port) instead of the Docker daemon's builder; with --registry BuildKit pushes there itself (no Docker daemon needed) [BERTH_BUILDKIT_ADDR]")
	f.StringVar(&logFormat, "log-format", env("BERTH_LOG_FORMAT", "text"), "log format: text or json [BERTH_LOG_FORMAT]")
	f.StringVar(&logLevel, "log-level", env("BERTH_LOG_LEVEL", "info"), "log level: debug, info, warn or error [BERTH_LOG_LEVEL]")
	f.StringVar(&o.Apply, "apply", env("BERTH_APPLY", ""), "a declarative file (see `berth apply`) made true at start-up, before Berth answers its first request [BERTH_APPLY]")
	f.BoolVar(&o.ApplyPrune, "apply-prune", envBool("BERTH_APPLY_PRUNE", false), "with --apply: delete the templates, endpoints, network volumes and registry auths the file does not name [BERTH_APPLY_PRUNE]")
	return cmd
}
