package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// berth key … and berth audit: Berth's own key management (/v1/keys) and
// audit trail (/v1/audit); both need an All key in BERTH_API_KEY.

func keyCommands(a *app) []*cobra.Command {
	key := &cobra.Command{Use: "key", Aliases: []string{"keys"}, Short: "Manage API keys (All, Read Only, Restricted to endpoints)",
		Long: `API keys as RunPod's console makes them: a name and a permission level —
ALL, READ_ONLY, or RESTRICTED with a per-endpoint NONE / READ / READ_WRITE.
The secret is printed once by create and only its hash is stored. These
commands need an All key. See docs/keys.md.`}
	cols := []column{{header: "ID", path: "id"}, {header: "NAME", path: "name"}, {header: "PREFIX", path: "prefix"},
		{header: "PERMISSION", path: "permission"}, {header: "ENDPOINTS", fn: grantsCell}, {header: "ENABLED", path: "enabled"},
		{header: "CREATED", path: "createdAt"}, {header: "LAST_USED", path: "lastUsed"}}
	path := func(ref string) string { return "/v1/keys/" + url.PathEscape(ref) }

	var perm string
	var grants []string
	body := func(cmd *cobra.Command, name string) (map[string]any, error) {
		b := map[string]any{}
		if name != "" {
			b["name"] = name
		}
		if changed(cmd.Flags(), "permission") {
			b["permission"] = perm
		}
		if changed(cmd.Flags(), "endpoint") {
			g, err := parseGrants(grants)
			if err != nil {
				return nil, err
			}
			b["endpoints"] = g
			if _, set := b["permission"]; !set && len(g) > 0 && cmd.Name() == "create" {
				b["permission"] = "RESTRICTED"
			}
		}
		return b, nil
	}
	grantFlags := func(c *cobra.Command, def string) {
		c.Flags().StringVar(&perm, "permission", def, "ALL, READ_ONLY or RESTRICTED")
		c.Flags().StringArrayVar(&grants, "endpoint", nil, "RESTRICTED: ENDPOINT_ID=READ|READ_WRITE|NONE (repeatable); --endpoint alone makes the key RESTRICTED")
	}

	create := &cobra.Command{Use: "create NAME", Short: "Create a key and print its secret (shown only this once)", Args: exactArgs(1, "NAME"),
		Example: "  berth key create ci-bot --endpoint abc123=READ_WRITE\n  berth key create dashboard-viewer --permission READ_ONLY",
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := body(cmd, args[0])
			if err != nil {
				return err
			}
			if _, ok := b["permission"]; !ok {
				b["permission"] = perm
			}
			var out map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodPost, "/v1/keys", b, &out); err != nil {
				return err
			}
			p := a.printer()
			if p.json || p.ids {
				return p.Object(out)
			}
			fmt.Fprintf(a.o.Stdout, "Key %s (%s, %s) created. Its secret, shown only this once:\n\n    %s\n\n", out["name"], out["id"], out["permission"], out["key"])
			return nil
		}}
	grantFlags(create, "ALL")

	list := &cobra.Command{Use: "list", Short: "List the keys (never their secrets)", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var items []any
			if err := a.client().Do(cmd.Context(), http.MethodGet, "/v1/keys", nil, &items); err != nil {
				return err
			}
			return a.printer().List(items, cols)
		}}
	get := &cobra.Command{Use: "get ID|NAME", Short: "Show one key", Args: exactArgs(1, "ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodGet, path(args[0]), nil, &out); err != nil {
				return err
			}
			return a.printer().Object(out)
		}}
	var rename string
	update := &cobra.Command{Use: "update ID|NAME", Short: "Change a key's name, permission or endpoint grants", Args: exactArgs(1, "ID|NAME"),
		Example: "  berth key update ci-bot --endpoint abc123=READ --endpoint def456=NONE\n  berth key update ci-bot --permission READ_ONLY",
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := body(cmd, rename)
			if err != nil {
				return err
			}
			if changed(cmd.Flags(), "endpoint") {
				// Grants given replace the key's: merge them with the
				// current ones so --endpoint X=NONE removes only X.
				var cur map[string]any
				if err := a.client().Do(cmd.Context(), http.MethodGet, path(args[0]), nil, &cur); err != nil {
					return err
				}
				merged := map[string]string{}
				if g, ok := cur["endpoints"].(map[string]any); ok {
					for k, v := range g {
						merged[k] = fmt.Sprint(v)
					}
				}
				for k, v := range b["endpoints"].(map[string]string) {
					merged[k] = v
				}
				b["endpoints"] = merged
			}
			if len(b) == 0 {
				return usageErr("nothing to change: give --name, --permission or --endpoint")
			}
			var out map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodPatch, path(args[0]), b, &out); err != nil {
				return err
			}
			return a.printer().Object(out)
		}}
	grantFlags(update, "")
	update.Flags().StringVar(&rename, "name", "", "a new name")
	state := func(use, short string, enabled bool) *cobra.Command {
		return &cobra.Command{Use: use + " ID|NAME", Short: short, Args: exactArgs(1, "ID|NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				var out map[string]any
				if err := a.client().Do(cmd.Context(), http.MethodPatch, path(args[0]), map[string]any{"enabled": enabled}, &out); err != nil {
					return err
				}
				return a.printer().Object(out)
			}}
	}
	del := &cobra.Command{Use: "delete ID|NAME", Aliases: []string{"rm"}, Short: "Delete a key: its next request is refused", Args: exactArgs(1, "ID|NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.client().Do(cmd.Context(), http.MethodDelete, path(args[0]), nil, nil)
		}}
	key.AddCommand(create, list, get, update, state("disable", "Disable a key (it is refused until enabled)", false),
		state("enable", "Enable a disabled key", true), del)

	var limit int
	audit := &cobra.Command{Use: "audit", Short: "Show the audit trail: management writes and key changes, newest first", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var items []any
			if err := a.client().Do(cmd.Context(), http.MethodGet, fmt.Sprintf("/v1/audit?limit=%d", limit), nil, &items); err != nil {
				return err
			}
			return a.printer().List(items, []column{{header: "TIME", path: "time"}, {header: "KEY", path: "key"},
				{header: "ACTION", path: "action"}, {header: "OBJECT", path: "object"}, {header: "STATUS", path: "status"}, {header: "ERROR", path: "error"}})
		}}
	audit.Flags().IntVar(&limit, "limit", 100, "entries to show (1-10000)")
	return []*cobra.Command{key, audit}
}

// parseGrants reads --endpoint ID=LEVEL flags.
func parseGrants(flags []string) (map[string]string, error) {
	g := map[string]string{}
	for _, f := range flags {
		id, lvl, ok := strings.Cut(f, "=")
		if !ok || id == "" {
			return nil, usageErr("--endpoint must be ENDPOINT_ID=READ|READ_WRITE|NONE, got %q", f)
		}
		g[id] = strings.ToUpper(lvl)
	}
	return g, nil
}

// grantsCell shows a key's endpoint grants: "abc=READ,def=READ_WRITE".
func grantsCell(obj map[string]any) string {
	g, _ := obj["endpoints"].(map[string]any)
	if len(g) == 0 {
		return "-"
	}
	var parts []string
	for k, v := range g {
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
