package cli

import (
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// gitCredentialCommand manages the git credentials builds clone private
// repositories with (docs/builds.md). Secrets are read from files, never
// from the command line (which other users of the host can see).
func gitCredentialCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "git-credential", Short: "Store, list and delete the git credentials builds clone with"}
	var name, username, tokenFile, keyFile, knownHostsFile string
	create := &cobra.Command{Use: "create --name NAME (--token-file FILE [--username USER] | --ssh-key-file FILE --known-hosts-file FILE)",
		Short: "Store a token (https) or an SSH key (ssh) credential; its secret is never shown again",
		Args:  exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := map[string]any{"name": name}
			read := func(flag, f string) (string, error) {
				b, err := os.ReadFile(f)
				if err != nil {
					return "", usageErr("--%s: %v", flag, err)
				}
				return string(b), nil
			}
			switch {
			case tokenFile != "" && keyFile == "":
				tok, err := read("token-file", tokenFile)
				if err != nil {
					return err
				}
				body["kind"], body["secret"], body["username"] = "TOKEN", strings.TrimSpace(tok), username
			case keyFile != "" && tokenFile == "":
				key, err := read("ssh-key-file", keyFile)
				if err != nil {
					return err
				}
				kh := ""
				if knownHostsFile != "" {
					if kh, err = read("known-hosts-file", knownHostsFile); err != nil {
						return err
					}
				}
				body["kind"], body["secret"], body["knownHosts"] = "SSH_KEY", key, kh
			default:
				return usageErr("git-credential create: give one of --token-file and --ssh-key-file")
			}
			var out map[string]any
			if err := a.client().Do(cmd.Context(), http.MethodPost, "/v2/gitcredentials", body, &out); err != nil {
				return err
			}
			return a.printer().Object(out)
		}}
	create.Flags().StringVar(&name, "name", "", "the credential's name")
	create.Flags().StringVar(&tokenFile, "token-file", "", "a file holding the access token (https)")
	create.Flags().StringVar(&username, "username", "", "the user name sent with the token [git]")
	create.Flags().StringVar(&keyFile, "ssh-key-file", "", "a file holding the SSH private key, without a passphrase (ssh)")
	create.Flags().StringVar(&knownHostsFile, "known-hosts-file", "", "a known_hosts file with the git server's host keys (ssh-keyscan HOST)")
	list := &cobra.Command{Use: "list", Short: "List the git credentials (never their secrets)", Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out struct{ GitCredentials []any }
			if err := a.client().Do(cmd.Context(), http.MethodGet, "/v2/gitcredentials", nil, &out); err != nil {
				return err
			}
			return a.printer().List(out.GitCredentials, []column{{header: "ID", path: "id"}, {header: "NAME", path: "name"}, {header: "KIND", path: "kind"}, {header: "CREATED", path: "createdAt"}})
		}}
	del := &cobra.Command{Use: "delete ID", Short: "Delete a git credential", Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.client().Do(cmd.Context(), http.MethodDelete, "/v2/gitcredentials/"+url.PathEscape(args[0]), nil, nil)
		}}
	cmd.AddCommand(create, list, del)
	return cmd
}
