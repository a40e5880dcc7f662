package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/stead-dev/stead/client"
)

// newSecretCmd is `stead secret` and its subcommands.
func newSecretCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secret",
		Aliases: []string{"secrets"},
		Short:   "Set, list and delete the tenant's secrets (API keys, tokens) for sandboxes",
		Long: `A secret is a named value the daemon keeps for the tenant's sandboxes: an API
key, a token. stead create --secret NAME gives it to the sandbox's service
and every exec as an environment variable; --secret-file NAME=/run/secrets/F
as a file on a tmpfs inside the sandbox.

Values are stored encrypted (under a key in the daemon's data directory,
secrets.key) and never shown again: stead secret ls shows names, times and
the sandboxes that use each. A sandbox, its snapshots and its pushes keep
the name only. Setting a secret again rotates it: execs see the new value
at once, a sandbox's service and secret files at its next start.

A secret cannot be deleted while a sandbox (a soft-deleted one included)
references it: the error names them.`,
		Example: `  stead secret set OPENAI_API_KEY          # reads the value from stdin
  printf %s "$KEY" | stead secret set OPENAI_API_KEY
  stead secret set GH_TOKEN --from-file ~/.config/gh/token
  stead create agent-1 --secret OPENAI_API_KEY --secret-file GH_TOKEN=/run/secrets/gh
  stead secret ls
  stead secret rm GH_TOKEN`,
	}
	group(cmd)
	cmd.AddCommand(newSecretSetCmd(g), newSecretLsCmd(g), newSecretRmCmd(g))
	return cmd
}

// newSecretSetCmd is `stead secret set`.
func newSecretSetCmd(g *globals) *cobra.Command {
	var fromFile string
	cmd := &cobra.Command{
		Use:   "set NAME [--from-file FILE]",
		Short: "Create or rotate a secret; the value comes from stdin or a file, never the command line",
		Long: `Create the secret NAME, or replace its value. NAME is an environment
variable name (letters, digits, underscores). The value is read from
--from-file, byte for byte, or else from stdin (one trailing newline
dropped; on a terminal it is asked for without echo). It never goes on the
command line, where ps and shell history would show it. Values are UTF-8
text without NUL bytes, up to 64 KiB.`,
		Example: `  stead secret set OPENAI_API_KEY
  printf %s "$KEY" | stead secret set OPENAI_API_KEY
  stead secret set SSH_KEY --from-file ~/.ssh/deploy_key`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			value, err := readSecretValue(g, fromFile)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := c.SetSecret(cmd.Context(), a[0], value)
			if err != nil {
				return fmt.Errorf("set secret %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, s)
			}
			verb := "set"
			if !s.UpdatedAt.Equal(s.CreatedAt) {
				verb = "rotated"
			}
			_, err = fmt.Fprintf(g.stdout, "secret %s %s%s\n", s.Name, verb, usedByNote(s.UsedBy))
			return err
		},
	}
	cmd.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file, byte for byte")
	return cmd
}

// usedByNote says which sandboxes a rotation reaches.
func usedByNote(users []string) string {
	if len(users) == 0 {
		return ""
	}
	return " (used by " + strings.Join(users, ", ") + ": execs get it now, services at their next start)"
}

// readSecretValue reads a secret's value from file, a terminal (without
// echo) or stdin.
func readSecretValue(g *globals, file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usageError{fmt.Errorf("--from-file: %w", err)}
		}
		return string(b), nil
	}
	if f, ok := g.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(g.stderr, "value (not echoed): ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(g.stderr)
		if err != nil {
			return "", fmt.Errorf("read the value: %w", err)
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(g.stdin, 1<<20))
	if err != nil {
		return "", fmt.Errorf("read the value from stdin: %w", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return "", usageError{errors.New("no value on stdin: pipe it in (printf %s \"$KEY\" | stead secret set NAME) or use --from-file")}
	}
	return string(b), nil
}

// newSecretLsCmd is `stead secret ls`.
func newSecretLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List secrets: names, times and the sandboxes using them (never values)",
		Example: `  stead secret ls
  stead secret ls --json`,
		Args: args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListSecrets(cmd.Context())
			if err != nil {
				return fmt.Errorf("list secrets: %w", err)
			}
			if g.json {
				if list == nil {
					list = []client.Secret{}
				}
				return printJSON(g.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintln(g.stderr, "no secrets; set one with: stead secret set NAME")
				return nil
			}
			tw := newTable(g.stdout)
			row(tw, "NAME", "CREATED", "UPDATED", "USED BY")
			for _, s := range list {
				row(tw, s.Name, ago(s.CreatedAt), ago(s.UpdatedAt), attachedStr(s.UsedBy, 3))
			}
			return tw.Flush()
		},
	}
}

// newSecretRmCmd is `stead secret rm`.
func newSecretRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"delete"},
		Short:   "Delete a secret no sandbox references",
		Long: `Delete the secret NAME. Refused (exit 4), naming them, while a sandbox
references it, soft-deleted sandboxes included (stead undelete would bring
the reference back): delete them with --purge first, or set a new value
instead.`,
		Example: `  stead secret rm GH_TOKEN`,
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteSecret(cmd.Context(), a[0]); err != nil {
				return fmt.Errorf("delete secret %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, map[string]string{"deleted": a[0]})
			}
			_, err = fmt.Fprintf(g.stdout, "secret %s deleted\n", a[0])
			return err
		},
	}
}

// secretRefStr describes a sandbox's reference to a secret in stead info:
// "OPENAI_API_KEY as $OPENAI_API_KEY", "GH_TOKEN in /run/secrets/gh".
func secretRefStr(r client.SecretRef) string {
	if r.File != "" {
		return r.Name + " in " + r.File
	}
	return r.Name + " as $" + r.Env
}
