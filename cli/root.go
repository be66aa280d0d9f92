// Package cli is Berth's command line: `berth serve` and the client verbs
// (`berth <noun> <verb>`) that talk to a running Berth over its HTTP API.
// main.go only calls Main; the server's wiring is given in Options.Serve.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes scripts can rely on (docs/cli.md).
const (
	ExitOK           = 0
	ExitError        = 1 // anything not listed below (server error, bad input refused by the server, …)
	ExitUsage        = 2 // wrong arguments or flags: nothing was sent
	ExitNotFound     = 3 // the server answered 404: no such endpoint, job, pod, …
	ExitJobFailed    = 4 // a job waited on ended FAILED, CANCELLED or TIMED_OUT
	ExitUnauthorized = 5 // the server refused the API key (401)
	ExitConflict     = 6 // the server answered 409 (name in use, resource in use, no free GPU)
	ExitUnreachable  = 7 // no answer from BERTH_URL
)

// Options are what the command line needs from package main.
type Options struct {
	Version string
	// Serve runs the server until ctx ends.
	Serve func(ctx context.Context, o ServeOptions) error
	// Stdin, Stdout and Stderr default to the process's.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv defaults to os.Getenv.
	Getenv func(string) string
	// IsTerminal reports whether w is a terminal (default: a tty check on
	// *os.File). Tests set it to exercise the terminal output.
	IsTerminal func(w io.Writer) bool
}

// exitError carries an exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{ExitUsage, fmt.Errorf(format, a...)}
}

// ExitCode maps an error returned by a command to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case 404:
			return ExitNotFound
		case 401, 403:
			return ExitUnauthorized
		case 409:
			return ExitConflict
		}
		return ExitError
	}
	var ue *unreachableError
	if errors.As(err, &ue) {
		return ExitUnreachable
	}
	// cobra's own argument errors
	if msg := err.Error(); strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "accepts ") || strings.HasPrefix(msg, "requires ") || strings.Contains(msg, "flag needs an argument") {
		return ExitUsage
	}
	return ExitError
}

// Main runs the command line and returns the exit code.
func Main(args []string, o Options) int {
	o.defaults()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := New(o)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(o.Stderr, "berth:", err)
		if ExitCode(err) == ExitUsage && !strings.Contains(err.Error(), "--help") {
			fmt.Fprintln(o.Stderr, "Run 'berth --help' or 'berth COMMAND --help' for usage.")
		}
	}
	return ExitCode(err)
}

func (o *Options) defaults() {
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.IsTerminal == nil {
		o.IsTerminal = isTerminal
	}
}

// app is the state shared by every command of one invocation.
type app struct {
	o      Options
	url    string
	output string // auto, table, json
	asJSON bool
}

func (a *app) client() *Client {
	return &Client{Base: strings.TrimRight(a.url, "/"), Key: a.o.Getenv("BERTH_API_KEY")}
}

// printer returns the output formatter chosen by --output/--json: a table
// on a terminal, JSON otherwise (so `berth … | jq` works without a flag).
func (a *app) printer() *printer {
	js := a.asJSON || a.output == "json" || (a.output == "auto" && !a.o.IsTerminal(a.o.Stdout))
	return &printer{w: a.o.Stdout, json: js && a.output != "id", ids: a.output == "id"}
}

// progress is where spinners and progress lines go: stderr, animated only
// on a terminal.
func (a *app) progress() *progress {
	return &progress{w: a.o.Stderr, tty: a.o.IsTerminal(a.o.Stderr)}
}

// New builds the command tree.
func New(o Options) *cobra.Command {
	o.defaults()
	a := &app{o: o}
	root := &cobra.Command{
		Use:   "berth",
		Short: "The RunPod serverless platform on one machine",
		Long: `berth — the RunPod serverless platform on one machine.

'berth serve' runs the server. Every other command is a client of a running
Berth: it talks to --url (BERTH_URL, default http://127.0.0.1:8080) with the
key in BERTH_API_KEY. Output is a table on a terminal and JSON otherwise
(--json or -o forces one). Exit codes: 0 ok, 1 error, 2 usage, 3 not found,
4 job failed/cancelled/timed out, 5 API key refused, 6 conflict, 7 server
unreachable.`,
		Version:           o.Version,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.SetIn(o.Stdin)
	root.SetOut(o.Stdout)
	root.SetErr(o.Stderr)
	root.SetVersionTemplate("berth {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{ExitUsage, err} })
	url := o.Getenv("BERTH_URL")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", url, "Berth's address (env BERTH_URL)")
	pf.StringVarP(&a.output, "output", "o", "auto", "output format: auto (table on a terminal, else JSON), table, json, or id (only the id of each record, one a line: ID=$(berth endpoint get NAME -o id))")
	pf.BoolVar(&a.asJSON, "json", false, "print JSON (same as -o json)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		switch a.output {
		case "auto", "table", "json", "id":
			return nil
		}
		return usageErr("--output must be auto, table, json or id, got %q", a.output)
	}

	root.AddGroup(&cobra.Group{ID: "jobs", Title: "Jobs:"}, &cobra.Group{ID: "manage", Title: "Management:"},
		&cobra.Group{ID: "host", Title: "This host:"})
	for _, c := range append(append(resourceCommands(a), applyCommand(a), initCommand(a), deployCommand(a), gitCredentialCommand(a), hfTokenCommand(a)), keyCommands(a)...) {
		c.GroupID = "manage"
		root.AddCommand(c)
	}
	for _, c := range jobCommands(a) {
		c.GroupID = "jobs"
		root.AddCommand(c)
	}
	for _, c := range hostCommands(a) {
		c.GroupID = "host"
		root.AddCommand(c)
	}
	root.AddCommand(modelsFetchCommand(a)) // hidden: the Kubernetes model download Job's program
	return root
}

// ServeOptions are `berth serve`'s settings: its flags and every
// environment variable it reads, read in one place (serveCommand, through
// Options.Getenv). main's serve makes them app.Config.
type ServeOptions struct {
	// APIKey is BERTH_API_KEY, the operator's All key (from the
	// environment only: a flag would show in ps); "": the stored keys.
	APIKey     string
	Addr       string
	Data       string
	RateLimits bool
	// KeyRateLimit caps each API key's requests per 10 seconds (0: none).
	KeyRateLimit   int
	WorkerTimeout  time.Duration
	ReconcileGrace time.Duration
	MaxAttempts    int
	// WebhookAllow opens addresses the default webhook policy forbids
	// (queue.ParseWebhookAllow's entries).
	WebhookAllow []string
	// FlashBoot eviction: a frozen worker is stopped after FlashMaxFrozen
	// (0: never) and while the host has less than FlashMinMemMiB MiB
	// available (0: never). See docs/flashboot.md.
	FlashMaxFrozen time.Duration
	FlashMinMemMiB int
	// What a GPU worker asks for per GPU beside it (runtime.Config's
	// VCPUsPerGPU, MemoryGiBPerGPU; 0: the per-type rule).
	WorkerVCPUsPerGPU     int
	WorkerMemoryGiBPerGPU int
	// Builds: the largest context upload (MiB), the build step's and the
	// whole build's time limits, and how many builds run at once.
	BuildMaxContextMiB int
	BuildStepTimeout   time.Duration
	BuildTimeout       time.Duration
	BuildConcurrency   int
	BuildImagesKept    int
	// Registry (HOST[/PREFIX]) receives every completed build; the
	// release runs the pushed image by digest. RegistryAuth names the
	// stored registry auth it is pushed and pulled with.
	Registry, RegistryAuth string
	// BuildkitAddr, when set, is the BuildKit daemon builds run on
	// (unix:///run/buildkit/buildkitd.sock, tcp://host:port).
	BuildkitAddr string
	// The model cache (docs/models.md): the Hub's base URL, the token
	// (from the environment only: a flag would show in ps), the cap in GB
	// (0: none), files downloading at once, and MB/s (0: unbounded).
	HFEndpoint      string
	HFToken         string
	ModelsMaxGB     float64
	ModelsSlots     int
	ModelsBandwidth float64
	// Apply is a declarative file (package apply) made true once Berth
	// runs, before it reports ready; ApplyPrune deletes what it does not
	// name.
	Apply      string
	ApplyPrune bool
	// Runtime is where workers and pods run: "docker" or "kubernetes".
	// The others are the Kubernetes runtime's: the kubeconfig file ("":
	// in-cluster, else the default loading rules), the namespace ("": the
	// kubeconfig's), the address workers reach Berth at, the listener
	// serving them only the worker protocol, and the volume
	// claims' storage class and access mode, and the pods' Service type.
	Runtime          string
	Kubeconfig       string
	Namespace        string
	AdvertiseURL     string
	WorkerAddr       string
	StorageClass     string
	VolumeAccessMode string
	ServiceType      string
	// KubePodTemplate is the operator's Pod template file (app.Kubernetes'
	// PodTemplate).
	KubePodTemplate string
	// The models claim on Kubernetes: the download Job's image, the
	// claim's storage class and access mode (app.Kubernetes').
	ModelsImage, ModelsStorageClass, ModelsAccessMode string
	// SelfPod and SelfNamespace are POD_NAME and POD_NAMESPACE, Berth's
	// own Pod when it runs in the cluster (deploy/kubernetes sets them
	// from the downward API; app.Kubernetes').
	SelfPod, SelfNamespace string
	// LBDomain (BERTH_LB_DOMAIN; "": lb.localhost) and LBTimeout
	// (BERTH_LB_TIMEOUT; 0: 5m30s) are the load balancer's
	// (lbproxy.Config's Domain and Timeout).
	LBDomain  string
	LBTimeout time.Duration
	Logger    *slog.Logger
	// KeyNotice receives the API key generated on the first successful
	// start (the command's stderr).
	KeyNotice io.Writer
	// Ready is called once the server accepts connections (systemd
	// readiness is sent from main's wiring; tests use it too).
	Ready func(addr string)
}

// exactArgs and rangeArgs are cobra.ExactArgs/RangeArgs with exit code 2.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr("%s: expected %s, got %d argument(s)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

func rangeArgs(lo, hi int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageErr("%s: expected %s, got %d argument(s)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

// changed reports whether the flag was set on the command line.
func changed(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Changed
}
