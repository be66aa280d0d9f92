package cli

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
)

// berth hf-token …: the Hugging Face token the model cache sends for gated
// and private models (PUT/GET/DELETE /v2/account/huggingface-token). It is
// read from stdin, never from an argument (shell history, ps), and no
// answer ever carries it back.

const hfTokenPath = "/v2/account/huggingface-token"

func hfTokenCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "hf-token", Short: "Store, show or clear the Hugging Face token for gated and private models",
		Long: `The token Berth sends to the Hugging Face Hub when it downloads the models
endpoints name (modelReferences). It is write-only: stored in Berth's
database, never shown again (show says only whether one is set). A stored
token wins over BERTH_HF_TOKEN/HF_TOKEN in berth serve's environment.
See docs/models.md.`}
	show := func(cmd *cobra.Command, out map[string]any) error {
		p := a.printer()
		if p.json || p.ids {
			return p.Object(out)
		}
		if set, _ := out["set"].(bool); set {
			fmt.Fprintf(a.o.Stdout, "A Hugging Face token is stored (since %v).\n", out["updatedAt"])
		} else {
			fmt.Fprintln(a.o.Stdout, "No Hugging Face token is stored.")
		}
		return nil
	}
	set := &cobra.Command{Use: "set", Short: "Store the token read from stdin (one line)", Args: exactArgs(0, "no arguments: the token is read from stdin"),
		Example: "  printenv HF_TOKEN | berth hf-token set\n  berth hf-token set < ~/.cache/huggingface/token",
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(io.LimitReader(a.o.Stdin, 64<<10)).ReadString('\n')
			if err != nil && err != io.EOF {
				return fmt.Errorf("reading the token from stdin: %w", err)
			}
			token := strings.TrimSpace(line)
			if token == "" {
				return usageErr("no token on stdin: pipe it in (printenv HF_TOKEN | berth hf-token set)")
			}
			var out map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodPut, hfTokenPath, map[string]any{"token": token}, &out); err != nil {
				return err
			}
			return show(cmd, out)
		}}
	get := &cobra.Command{Use: "show", Aliases: []string{"get"}, Short: "Say whether a token is stored (never the token)", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodGet, hfTokenPath, nil, &out); err != nil {
				return err
			}
			return show(cmd, out)
		}}
	clear := &cobra.Command{Use: "clear", Short: "Delete the stored token", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodDelete, hfTokenPath, nil, &out); err != nil {
				return err
			}
			return show(cmd, out)
		}}
	cmd.AddCommand(set, get, clear)
	return cmd
}
