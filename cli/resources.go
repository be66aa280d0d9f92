package cli

import (
	"berth/v1input"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// resource is one /v1 management collection. Its create and update flags
// are made from the API's own input types, so every field has a flag and a
// new field gets one without touching the CLI.
type resource struct {
	noun, plural string
	aliases      []string
	path         string // /v1/templates
	create       reflect.Type
	update       reflect.Type // nil: no update
	cols         []column
	// getQuery are boolean query flags of get and list (flag → parameter).
	getQuery map[string]string
}

func resources() []resource {
	workers := func(obj map[string]any) string {
		st, _ := lookup(obj, "status.workers").(map[string]any)
		if st == nil {
			return "-"
		}
		return fmt.Sprintf("%s/%s/%s", format(st["idle"]), format(st["running"]), format(st["initializing"]))
	}
	return []resource{
		{noun: "template", plural: "templates", aliases: []string{"templates", "tpl"}, path: "/v1/templates",
			create: reflect.TypeFor[v1input.TemplateInput](), update: reflect.TypeFor[v1input.TemplateInput](),
			cols: []column{{header: "ID", path: "id"}, {header: "NAME", path: "name"}, {header: "IMAGE", path: "imageName"},
				{header: "SERVERLESS", path: "isServerless"}, {header: "ENDPOINTS", fn: boundTo}, {header: "CREATED", path: "createdAt"}}},
		{noun: "endpoint", plural: "endpoints", aliases: []string{"endpoints", "ep"}, path: "/v1/endpoints",
			create: reflect.TypeFor[v1input.EndpointInput](), update: reflect.TypeFor[v1input.EndpointInput](),
			cols: []column{{header: "ID", path: "id"}, {header: "NAME", path: "name"}, {header: "TEMPLATE", path: "templateId"},
				{header: "GPUS", path: "gpuTypeIds"}, {header: "MIN", path: "workersMin"}, {header: "MAX", path: "workersMax"},
				{header: "IDLE/RUN/INIT", fn: workers}, {header: "REASON", path: "status.reason"}},
			getQuery: map[string]string{"workers": "includeWorkers", "template": "includeTemplate"}},
		{noun: "pod", plural: "pods", aliases: []string{"pods"}, path: "/v1/pods",
			create: reflect.TypeFor[v1input.PodInput](), update: reflect.TypeFor[v1input.PodUpdateInput](),
			cols: []column{{header: "ID", path: "id"}, {header: "NAME", path: "name"}, {header: "IMAGE", path: "imageName"},
				{header: "STATUS", path: "desiredStatus"}, {header: "GPU", path: "gpu.id"}, {header: "PORTS", path: "portMappings"},
				{header: "MESSAGE", path: "statusMessage"}},
			getQuery: map[string]string{"template": "includeTemplate", "volume": "includeNetworkVolume", "machine": "includeMachine"}},
		{noun: "volume", plural: "network volumes", aliases: []string{"volumes", "networkvolume", "vol"}, path: "/v1/networkvolumes",
			create: reflect.TypeFor[v1input.VolumeInput](), update: reflect.TypeFor[v1input.VolumeInput](),
			cols: []column{{header: "ID", path: "id"}, {header: "NAME", path: "name"}, {header: "SIZE_GB", path: "size"},
				{header: "USED_BYTES", path: "usedBytes"}, {header: "DATA_CENTER", path: "dataCenterId"},
				{header: "CLAIM", path: "claim.status"}, {header: "CLAIM_REASON", path: "claim.reason"}}},
		{noun: "registry", plural: "container registry auths", aliases: []string{"registries", "registryauth"}, path: "/v1/containerregistryauth",
			create: reflect.TypeFor[v1input.RegistryAuthInput](),
			cols:   []column{{header: "ID", path: "id"}, {header: "NAME", path: "name"}}},
	}
}

func resourceCommands(a *app) []*cobra.Command {
	var out []*cobra.Command
	for _, r := range resources() {
		out = append(out, r.command(a))
	}
	return out
}

func (r resource) command(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: r.noun, Aliases: r.aliases, Short: "Manage " + r.plural, RunE: unknownVerb}
	one := strings.ToUpper(r.noun) + "_ID"
	getArg := one + "|NAME"

	var listQuery map[string]*bool
	list := &cobra.Command{Use: "list", Aliases: []string{"ls"}, Short: "List " + r.plural, Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var items []any
			path := r.path + query(listQuery)
			if r.noun == "template" {
				// Berth's own CLI lists every template, those an endpoint
				// holds too (the v1 list hides them by RunPod's rule).
				path = r.path + "?includeEndpointBoundTemplates=true"
			}
			if err := a.client().Do(cmd.Context(), http.MethodGet, path, nil, &items); err != nil {
				return err
			}
			if r.noun == "template" {
				if err := a.markBound(cmd.Context(), items); err != nil {
					return err
				}
			}
			return a.printer().List(items, r.cols)
		}}
	listQuery = boolQueryFlags(list.Flags(), r.getQuery)

	var getQuery map[string]*bool
	get := &cobra.Command{Use: "get " + getArg, Short: "Show one " + r.noun + " (by id, or by its name when no record has that id)", Args: exactArgs(1, getArg),
		RunE: func(cmd *cobra.Command, args []string) error {
			var obj any
			err := a.client().Do(cmd.Context(), http.MethodGet, r.path+"/"+url.PathEscape(args[0])+query(getQuery), nil, &obj)
			if maybeName(err) {
				// Not an id: a name (unique among the records).
				var id string
				if id, err = a.idByName(cmd.Context(), r, args[0], err); err == nil {
					err = a.client().Do(cmd.Context(), http.MethodGet, r.path+"/"+url.PathEscape(id)+query(getQuery), nil, &obj)
				}
			}
			if err != nil {
				return err
			}
			return a.printer().Object(obj)
		}}
	getQuery = boolQueryFlags(get.Flags(), r.getQuery)

	del := &cobra.Command{Use: "delete " + getArg + "...", Aliases: []string{"rm"}, Short: "Delete " + r.plural + " (by id or name)", Args: rangeArgs(1, 1<<20, getArg+"..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, arg := range args {
				err := a.withID(cmd.Context(), r, arg, func(id string) error {
					return a.client().Do(cmd.Context(), http.MethodDelete, r.path+"/"+url.PathEscape(id), nil, nil)
				})
				if err != nil {
					return err
				}
				if !a.printer().json {
					fmt.Fprintln(a.o.Stdout, "deleted", arg)
				}
			}
			if a.printer().json {
				return a.printer().JSON(map[string]any{"deleted": args})
			}
			return nil
		}}

	create := r.createCommand(a)
	cmd.AddCommand(list, get, create, del)
	if r.update != nil {
		cmd.AddCommand(r.updateCommand(a, getArg))
	}
	if r.noun == "endpoint" {
		cmd.AddCommand(rollbackCommand(a, r, getArg))
	}
	if r.noun == "pod" {
		cmd.AddCommand(podCommands(a)...)
	}
	return cmd
}

// idByName finds the one record of r named name (notFound is the error to
// return when none is).
func (a *app) idByName(ctx context.Context, r resource, name string, notFound error) (string, error) {
	path := r.path
	if r.noun == "template" {
		path += "?includeEndpointBoundTemplates=true"
	}
	var items []map[string]any
	if err := a.client().Do(ctx, http.MethodGet, path, nil, &items); err != nil {
		return "", err
	}
	var ids []string
	for _, it := range items {
		if it["name"] == name {
			id, _ := it["id"].(string)
			ids = append(ids, id)
		}
	}
	switch len(ids) {
	case 0:
		return "", notFound
	case 1:
		return ids[0], nil
	}
	return "", &exitError{ExitConflict, fmt.Errorf("%d %s are named %q (%s): give the id", len(ids), r.plural, name, strings.Join(ids, ", "))}
}

// withID runs do with arg, an id; when the answer is "not found" and one
// record of r is named arg, again with its id — so every verb that takes
// an id takes a name too, as get does.
func (a *app) withID(ctx context.Context, r resource, arg string, do func(id string) error) error {
	err := do(arg)
	if !maybeName(err) {
		return err
	}
	id, err2 := a.idByName(ctx, r, arg, err)
	if err2 != nil || id == arg {
		return cmpOr(err2, err) // none of that name: the 404; two: which
	}
	return do(id)
}

// maybeName: err may say arg was not an id — 404, or 400 where the API
// refuses what cannot be an id (a template's) — so arg may be a name.
func maybeName(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusBadRequest)
}

func cmpOr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// resourceOf is the resource of noun.
func resourceOf(noun string) resource {
	for _, r := range resources() {
		if r.noun == noun {
			return r
		}
	}
	panic("cli: no resource " + noun)
}

// unknownVerb is a noun's own action: help when bare, exit 2 for a verb
// it does not have.
func unknownVerb(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	return usageErr("unknown command %q for %q", args[0], cmd.CommandPath())
}

func boolQueryFlags(fs *pflag.FlagSet, m map[string]string) map[string]*bool {
	out := map[string]*bool{}
	for flag, param := range m {
		out[param] = fs.Bool(flag, false, "include "+param+"=true")
	}
	return out
}

func query(m map[string]*bool) string {
	v := url.Values{}
	for k, b := range m {
		if *b {
			v.Set(k, "true")
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

func (r resource) createCommand(a *app) *cobra.Command {
	use := "create [flags]"
	switch r.noun {
	case "template":
		use = "create [NAME IMAGE] [flags]"
	case "endpoint":
		use = "create [TEMPLATE] [flags]"
	}
	var fields *inputFlags
	var file string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{Use: use, Short: "Create a " + r.noun + " (flags for every field, or -f FILE.json)",
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := fields.body(cmd, file, a.o.Stdin)
			if err != nil {
				return err
			}
			switch {
			case r.noun == "template" && len(args) == 2:
				body["name"], body["imageName"] = args[0], args[1]
			case r.noun == "endpoint" && len(args) == 1:
				// A template's id or, as every other verb takes, its name.
				tid, tpl := args[0], resourceOf("template")
				err := a.client().Do(cmd.Context(), http.MethodGet, tpl.path+"/"+url.PathEscape(tid), nil, nil)
				if maybeName(err) {
					none := &exitError{ExitNotFound, fmt.Errorf("%s: no template has the id or name %q", cmd.CommandPath(), tid)}
					tid, err = a.idByName(cmd.Context(), tpl, tid, none)
				}
				if err != nil {
					return err
				}
				body["templateId"] = tid
			case len(args) > 0:
				return usageErr("%s: unexpected arguments %q (fields are flags: see --help)", cmd.CommandPath(), args)
			}
			// Berth's CLI is mostly used for serverless templates.
			if _, set := body["isServerless"]; r.noun == "template" && !set {
				body["isServerless"] = true
			}
			var obj map[string]any
			do := func(ctx context.Context) error {
				return a.client().Do(ctx, http.MethodPost, r.path, body, &obj)
			}
			if r.noun == "pod" && wait {
				// Creating a pod pulls its image before it answers.
				name, _ := body["name"].(string)
				err = createPodShowingPull(cmd.Context(), a, name, do)
			} else {
				err = do(cmd.Context())
			}
			if err != nil {
				return err
			}
			if wait {
				switch r.noun {
				case "endpoint":
					if obj, err = waitEndpoint(cmd.Context(), a, obj, timeout); err != nil {
						return err
					}
				case "pod":
					if obj, err = waitPod(cmd.Context(), a, obj, timeout); err != nil {
						return err
					}
				}
			}
			return a.printer().Object(obj)
		}}
	fields = newInputFlags(cmd.Flags(), r.create)
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the fields from a JSON file (- for stdin); flags override it")
	if r.noun == "endpoint" || r.noun == "pod" {
		what := "workersMin workers are ready (image pulls shown as they progress)"
		if r.noun == "pod" {
			what = "the pod is running"
		}
		cmd.Flags().BoolVar(&wait, "wait", false, "wait until "+what)
		cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "give up --wait after this long")
	}
	return cmd
}

func (r resource) updateCommand(a *app, one string) *cobra.Command {
	var fields *inputFlags
	var file string
	cmd := &cobra.Command{Use: "update " + one + " [flags]", Short: "Change fields of a " + r.noun + " (only those given)", Args: exactArgs(1, one),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := fields.body(cmd, file, a.o.Stdin)
			if err != nil {
				return err
			}
			if len(body) == 0 {
				return usageErr("%s: nothing to change: give field flags or -f FILE", cmd.CommandPath())
			}
			var obj any
			err = a.withID(cmd.Context(), r, args[0], func(id string) error {
				return a.client().Do(cmd.Context(), http.MethodPatch, r.path+"/"+url.PathEscape(id), body, &obj)
			})
			if err != nil {
				return err
			}
			return a.printer().Object(obj)
		}}
	fields = newInputFlags(cmd.Flags(), r.update)
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the fields from a JSON file (- for stdin); flags override it")
	return cmd
}

// inputFlags are the flags made from an input type's JSON fields.
type inputFlags struct {
	fs     *pflag.FlagSet
	fields []inputField
}

type inputField struct {
	json, flag string
	clear      string // a bool flag that sets the field to [] ("" none)
	get        func() any
}

// flagName turns a JSON field name into a flag name: imageName →
// image-name, gpuTypeIds → gpu-type-ids, minRAMPerGPU → min-ram-per-gpu.
func flagName(s string) string {
	s = strings.ReplaceAll(s, "MBps", "Mbps")
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 {
			prevLower := unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1])
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || (unicode.IsUpper(rs[i-1]) && nextLower) {
				b.WriteByte('-')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// multiWord fields take whole values per flag (commands hold commas).
var multiWord = map[string]bool{"dockerEntrypoint": true, "dockerStartCmd": true}

func newInputFlags(fs *pflag.FlagSet, t reflect.Type) *inputFlags {
	in := &inputFlags{fs: fs}
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fl := flagName(name)
		help := "the " + name + " field"
		var get func() any
		if name == "modelReferences" {
			// runpodctl's --model-reference and --clear-models, shorter.
			p := fs.StringArray("model", nil, "a Hugging Face model the workers start with, https://huggingface.co/ORG/NAME[:REF]; repeat the flag for more (replaces the list)")
			clear := fs.Bool("clear-models", false, "remove every model reference")
			in.fields = append(in.fields, inputField{json: name, flag: "model", clear: "clear-models", get: func() any {
				if *clear || *p == nil {
					return []string{}
				}
				return *p
			}})
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer && ft.Elem().Kind() != reflect.Slice {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.String:
			p := fs.String(fl, "", help)
			get = func() any { return *p }
		case ft.Kind() == reflect.Int || ft.Kind() == reflect.Int64:
			p := fs.Int64(fl, 0, help)
			get = func() any { return *p }
		case ft.Kind() == reflect.Float64:
			p := fs.Float64(fl, 0, help)
			get = func() any { return *p }
		case ft.Kind() == reflect.Bool:
			p := fs.Bool(fl, false, help)
			get = func() any { return *p }
		case ft.Kind() == reflect.Map:
			p := fs.StringArray(fl, nil, help+": KEY=VALUE, repeat the flag for more")
			get = func() any {
				m := map[string]string{}
				for _, kv := range *p {
					k, v, _ := strings.Cut(kv, "=")
					m[k] = v
				}
				return m
			}
		case multiWord[name]:
			p := fs.StringArray(fl, nil, help+": one word per flag, repeat it")
			get = func() any { return *p }
		default: // []string, ports
			p := fs.StringSlice(fl, nil, help+": comma-separated or repeated (\"\" clears it)")
			get = func() any {
				if *p == nil {
					return []string{}
				}
				return *p
			}
		}
		in.fields = append(in.fields, inputField{json: name, flag: fl, get: get})
	}
	return in
}

// body is -f's object (if any) with the flags given set over it.
func (in *inputFlags) body(cmd *cobra.Command, file string, stdin io.Reader) (map[string]any, error) {
	body := map[string]any{}
	if file != "" {
		var b []byte
		var err error
		if file == "-" {
			b, err = io.ReadAll(stdin)
		} else {
			b, err = os.ReadFile(file)
		}
		if err != nil {
			return nil, usageErr("-f: %v", err)
		}
		if err := json.Unmarshal(b, &body); err != nil {
			return nil, usageErr("-f %s: not a JSON object: %v", file, err)
		}
	}
	for _, f := range in.fields {
		if f.clear != "" && changed(in.fs, f.clear) && changed(in.fs, f.flag) {
			return nil, usageErr("--%s and --%s exclude each other", f.clear, f.flag)
		}
		if changed(in.fs, f.flag) || (f.clear != "" && changed(in.fs, f.clear)) {
			if m, ok := f.get().(map[string]string); ok {
				for k := range m {
					if k == "" {
						return nil, usageErr("--%s: want KEY=VALUE", f.flag)
					}
				}
			}
			body[f.json] = f.get()
		}
	}
	return body, nil
}

// markBound adds "endpoints" to each template: the endpoints using it, as
// {"id", "name"} (Berth's CLI only; the API's templates have no such field).
func (a *app) markBound(ctx context.Context, templates []any) error {
	var eps []map[string]any
	if err := a.client().Do(ctx, http.MethodGet, "/v1/endpoints", nil, &eps); err != nil {
		return err
	}
	for _, t := range templates {
		tm, ok := t.(map[string]any)
		if !ok {
			continue
		}
		bound := []any{}
		for _, e := range eps {
			if e["templateId"] == tm["id"] {
				bound = append(bound, map[string]any{"id": e["id"], "name": e["name"]})
			}
		}
		tm["endpoints"] = bound
	}
	return nil
}

// boundTo is a template's ENDPOINTS cell: "name (id)" of each endpoint
// using it, "-" for none.
func boundTo(obj map[string]any) string {
	list, _ := obj["endpoints"].([]any)
	if len(list) == 0 {
		return "-"
	}
	var out []string
	for _, e := range list {
		em, _ := e.(map[string]any)
		out = append(out, fmt.Sprintf("%s (%v)", printable(fmt.Sprint(em["name"])), em["id"]))
	}
	return strings.Join(out, ", ")
}
