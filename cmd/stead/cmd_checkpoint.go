package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// maxCheckpointInput caps what `checkpoint put` and `checkpoint schema`
// read (the daemon refuses more than 1 MiB anyway).
const maxCheckpointInput = 1 << 20

// newCheckpointCmd is `stead checkpoint` and its subcommands.
func newCheckpointCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "checkpoint",
		Aliases: []string{"checkpoints", "ckpt"},
		Short:   "Read and write an agent's checkpoint documents (versioned JSON kept outside the sandbox)",
		Long: `Checkpoint documents are named JSON documents of a sandbox, and of a named
agent within it (--agent), kept by the daemon outside the sandbox. Every put
writes a new version atomically; the newest versions (default 10, --keep) are
kept with their time, the API key that wrote them and a run id. --if-match N
makes a put succeed only if the latest version is still N (0: the document
must not exist yet), else it fails with exit code 4 and changes nothing.
A document may have a JSON Schema that every write must pass, and a policy
(stead checkpoint policy): who may write it, who may read it, and whether it
is mutable, append-only or immutable.`,
		Example: `  stead checkpoint put agent-1 plan plan.json --run run-7
  echo '{"step": 3}' | stead checkpoint put agent-1 plan - --if-match 2
  stead checkpoint get agent-1 plan > plan.json
  stead checkpoint get agent-1 plan --version 1 --json
  stead checkpoint ls agent-1
  stead checkpoint history agent-1 plan
  stead checkpoint rollback agent-1 plan 1
  stead checkpoint schema agent-1 plan plan.schema.json
  stead checkpoint policy agent-1 decisions --write agent --mutability append-only
  stead checkpoint rm agent-1 plan`,
	}
	group(cmd)
	cmd.AddCommand(
		newCheckpointPutCmd(g),
		newCheckpointGetCmd(g),
		newCheckpointLsCmd(g),
		newCheckpointHistoryCmd(g),
		newCheckpointRollbackCmd(g),
		newCheckpointSchemaCmd(g),
		newCheckpointPolicyCmd(g),
		newCheckpointRmCmd(g),
	)
	return cmd
}

// readInput reads a file, or standard input for "-", up to the limit.
func (g *globals) readInput(name string) ([]byte, error) {
	var r io.Reader = g.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, usageError{fmt.Errorf("read %s: %w", name, err)}
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxCheckpointInput+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxCheckpointInput {
		return nil, usageError{fmt.Errorf("read %s: more than %d bytes; a checkpoint document is at most 1 MiB", name, maxCheckpointInput)}
	}
	return b, nil
}

// ifMatch returns the --if-match flag as a version pointer (nil when the
// flag was not given).
func ifMatch(cmd *cobra.Command, v int64) (*int64, error) {
	if !cmd.Flags().Changed("if-match") {
		return nil, nil
	}
	if v < 0 {
		return nil, usageError{fmt.Errorf("--if-match %d: want a version, or 0 for a document that must not exist", v)}
	}
	return &v, nil
}

// docName is how a document is named in messages.
func docName(sandbox, agent, name string) string {
	if agent == "" {
		return sandbox + "/" + name
	}
	return sandbox + "/" + agent + "/" + name
}

// printVersion prints the outcome of a write: JSON, or one line.
func (g *globals) printVersion(sandbox string, cp client.Checkpoint) error {
	if g.json {
		return printJSON(g.stdout, cp)
	}
	line := fmt.Sprintf("%s: version %d", docName(sandbox, cp.Agent, cp.Name), cp.Version)
	if cp.Note != "" {
		line += " (" + cp.Note + ")"
	}
	_, err := fmt.Fprintln(g.stdout, line)
	return err
}

func newCheckpointPutCmd(g *globals) *cobra.Command {
	var agent, run string
	var ifm int64
	var keep int
	cmd := &cobra.Command{
		Use:   "put SANDBOX NAME FILE|-",
		Short: "Write a document's next version from a JSON file or standard input",
		Example: `  stead checkpoint put agent-1 plan plan.json
  echo '{"step": 3}' | stead checkpoint put agent-1 plan - --if-match 2 --run run-7
  stead checkpoint put agent-1 notes notes.json --agent planner --keep 50`,
		Args: args(3, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			iv, err := ifMatch(cmd, ifm)
			if err != nil {
				return err
			}
			body, err := g.readInput(a[2])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			cp, err := c.PutCheckpoint(cmd.Context(), a[0], a[1], body,
				client.PutCheckpointOptions{Agent: agent, IfVersion: iv, Run: run, Keep: keep})
			if err != nil {
				return fmt.Errorf("put checkpoint %s: %w", docName(a[0], agent, a[1]), err)
			}
			return g.printVersion(a[0], cp)
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "named agent within the sandbox (default: the sandbox's own)")
	cmd.Flags().StringVar(&run, "run", "", "run id recorded with the version")
	cmd.Flags().Int64Var(&ifm, "if-match", 0, "write only if the latest version is this one (0: the document must not exist)")
	cmd.Flags().IntVar(&keep, "keep", 0, "set how many versions the document keeps (default 10)")
	return cmd
}

func newCheckpointGetCmd(g *globals) *cobra.Command {
	var agent string
	var version int64
	cmd := &cobra.Command{
		Use:   "get SANDBOX NAME",
		Short: "Print a document (the latest version, or --version N)",
		Long: `Print a document's JSON body, indented. With --json, print the whole version:
name, version, created_at, principal, run, note and body.`,
		Example: `  stead checkpoint get agent-1 plan
  stead checkpoint get agent-1 plan --version 3 --json`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			if version < 0 {
				return usageError{fmt.Errorf("--version %d: versions start at 1", version)}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			cp, err := c.GetCheckpoint(cmd.Context(), a[0], agent, a[1], version)
			if err != nil {
				return fmt.Errorf("get checkpoint %s: %w", docName(a[0], agent, a[1]), err)
			}
			if g.json {
				return printJSON(g.stdout, cp)
			}
			var out bytes.Buffer
			if err := json.Indent(&out, cp.Body, "", "  "); err != nil {
				return fmt.Errorf("print checkpoint %s: %w", docName(a[0], agent, a[1]), err)
			}
			out.WriteByte('\n')
			_, err = g.stdout.Write(out.Bytes())
			return err
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "named agent within the sandbox")
	cmd.Flags().Int64Var(&version, "version", 0, "version to print (default: the latest)")
	return cmd
}

func newCheckpointLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls SANDBOX",
		Aliases: []string{"list"},
		Short:   "List a sandbox's documents (every agent)",
		Example: "  stead checkpoint ls agent-1",
		Args:    args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListCheckpoints(cmd.Context(), a[0])
			if err != nil {
				return fmt.Errorf("list checkpoints of %s: %w", a[0], err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "AGENT", "NAME", "VERSION", "KEPT", "KEEP", "SCHEMA", "POLICY", "UPDATED")
			for _, d := range list {
				schema := "-"
				if len(d.Schema) > 0 {
					schema = "yes"
				}
				row(tw, orDash(d.Agent), d.Name, strconv.FormatInt(d.Version, 10),
					strconv.Itoa(d.Versions), strconv.Itoa(d.Keep), schema, policySummary(d.Policy), ago(d.UpdatedAt))
			}
			return tw.Flush()
		},
	}
}

func newCheckpointHistoryCmd(g *globals) *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:     "history SANDBOX NAME",
		Aliases: []string{"versions", "log"},
		Short:   "List the kept versions of a document, oldest first",
		Example: "  stead checkpoint history agent-1 plan",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.CheckpointVersions(cmd.Context(), a[0], agent, a[1])
			if err != nil {
				return fmt.Errorf("list versions of checkpoint %s: %w", docName(a[0], agent, a[1]), err)
			}
			if g.json {
				return printJSON(g.stdout, list)
			}
			tw := newTable(g.stdout)
			row(tw, "VERSION", "CREATED", "PRINCIPAL", "RUN", "NOTE")
			for _, v := range list {
				row(tw, strconv.FormatInt(v.Version, 10), ago(v.CreatedAt), orDash(v.Principal), orDash(v.Run), orDash(v.Note))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "named agent within the sandbox")
	return cmd
}

func newCheckpointRollbackCmd(g *globals) *cobra.Command {
	var agent, run string
	var ifm int64
	cmd := &cobra.Command{
		Use:   "rollback SANDBOX NAME VERSION",
		Short: "Write an earlier version's body as the document's next version",
		Long: `Write version VERSION's body as the document's next version. History is kept:
the new version notes "rollback from VERSION". It must pass the document's
current schema.`,
		Example: `  stead checkpoint rollback agent-1 plan 3
  stead checkpoint rollback agent-1 plan 3 --if-match 7`,
		Args: args(3, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			v, err := strconv.ParseInt(a[2], 10, 64)
			if err != nil || v < 1 {
				return usageError{fmt.Errorf("version %q: want a version number such as 3", a[2])}
			}
			iv, err := ifMatch(cmd, ifm)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			cp, err := c.RollbackCheckpoint(cmd.Context(), a[0], agent, a[1],
				client.RollbackCheckpointRequest{Version: v, Run: run, IfVersion: iv})
			if err != nil {
				return fmt.Errorf("rollback checkpoint %s to version %d: %w", docName(a[0], agent, a[1]), v, err)
			}
			return g.printVersion(a[0], cp)
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "named agent within the sandbox")
	cmd.Flags().StringVar(&run, "run", "", "run id recorded with the new version")
	cmd.Flags().Int64Var(&ifm, "if-match", 0, "roll back only if the latest version is this one")
	return cmd
}

func newCheckpointSchemaCmd(g *globals) *cobra.Command {
	var agent string
	var remove bool
	cmd := &cobra.Command{
		Use:   "schema SANDBOX NAME [FILE|-]",
		Short: "Set (or --remove) the JSON Schema every later write of a document must pass",
		Long: `Set the JSON Schema (draft 2020-12 unless its $schema says otherwise) that
every later put or rollback of the document must pass; a write that fails it
is refused and changes nothing. References outside the schema are not
loaded. The document's existing versions are not re-checked.`,
		Example: `  stead checkpoint schema agent-1 plan plan.schema.json
  stead checkpoint schema agent-1 plan --remove`,
		Args: args(2, 3),
		RunE: func(cmd *cobra.Command, a []string) error {
			var schema []byte
			switch {
			case remove && len(a) == 3:
				return usageError{fmt.Errorf("give either a schema FILE or --remove, not both")}
			case !remove && len(a) == 2:
				return usageError{fmt.Errorf("give a schema FILE (or - for standard input), or --remove")}
			case !remove:
				b, err := g.readInput(a[2])
				if err != nil {
					return err
				}
				if !json.Valid(b) {
					return usageError{fmt.Errorf("schema %s is not valid JSON", a[2])}
				}
				schema = b
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			info, err := c.SetCheckpointSchema(cmd.Context(), a[0], agent, a[1], schema)
			if err != nil {
				return fmt.Errorf("set schema of checkpoint %s: %w", docName(a[0], agent, a[1]), err)
			}
			if g.json {
				return printJSON(g.stdout, info)
			}
			state := "schema set"
			if remove {
				state = "schema removed"
			}
			_, err = fmt.Fprintf(g.stdout, "%s: %s\n", docName(a[0], info.Agent, info.Name), state)
			return err
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "named agent within the sandbox")
	cmd.Flags().BoolVar(&remove, "remove", false, "remove the document's schema")
	return cmd
}

func newCheckpointRmCmd(g *globals) *cobra.Command {
	var agent string
	cmd := &cobra.Command{
		Use:     "rm SANDBOX NAME",
		Aliases: []string{"delete"},
		Short:   "Delete a document with every version and its schema",
		Example: "  stead checkpoint rm agent-1 plan",
		Args:    args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteCheckpoint(cmd.Context(), a[0], agent, a[1]); err != nil {
				return fmt.Errorf("delete checkpoint %s: %w", docName(a[0], agent, a[1]), err)
			}
			_, err = fmt.Fprintf(g.stdout, "%s: deleted\n", docName(a[0], agent, a[1]))
			return err
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "named agent within the sandbox")
	return cmd
}

func newCheckpointPolicyCmd(g *globals) *cobra.Command {
	var agent, write, read, mutability, keep string
	cmd := &cobra.Command{
		Use:   "policy SANDBOX NAME",
		Short: "Show or set a document's governance: who may write, who may read, mutability, history depth",
		Long: `Set the governance of a checkpoint document; without flags, show it.
--write and --read take any (every key of the tenant and the sandbox's agent
token), admin (admin keys only), agent (the sandbox's own agent token only)
or keys=ID1,ID2 (those API key ids only). --mutability takes mutable,
append-only (each version must be a JSON array that starts with the previous
one, or a JSON object that keeps every previous key and value) or immutable
(version 1 only, no rollback). --keep N sets the history depth; none keeps
only the latest version. Flags not given keep their current values.

A document with the default policy may be governed by anyone who may write
it; once governed, only an admin key may change its policy. A write or read
the policy forbids is refused (HTTP 403) and says who may.`,
		Example: `  stead checkpoint policy agent-1 decisions --write agent --mutability append-only
  stead checkpoint policy agent-1 charter --write admin --mutability immutable
  stead checkpoint policy agent-1 secrets --read keys=key-abc,key-def
  stead checkpoint policy agent-1 scratch --keep none
  stead checkpoint policy agent-1 decisions`,
		Args: args(2, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ref := docName(a[0], agent, a[1])
			cur, found, err := findCheckpoint(cmd, c, a[0], agent, a[1])
			if err != nil {
				return fmt.Errorf("policy of checkpoint %s: %w", ref, err)
			}
			f := cmd.Flags()
			if !f.Changed("write") && !f.Changed("read") && !f.Changed("mutability") && !f.Changed("keep") {
				if !found {
					return fmt.Errorf("policy of checkpoint %s: %w", ref, errNoSuchCheckpoint)
				}
				return printPolicy(g, a[0], cur)
			}
			req := client.SetCheckpointPolicyRequest{Write: cur.Policy.Write, Read: cur.Policy.Read, Mutability: cur.Policy.Mutability}
			if f.Changed("write") {
				if req.Write, err = parseAccessFlag("--write", write); err != nil {
					return err
				}
			}
			if f.Changed("read") {
				if req.Read, err = parseAccessFlag("--read", read); err != nil {
					return err
				}
			}
			if f.Changed("mutability") {
				switch mutability {
				case client.Mutable, client.AppendOnly, client.Immutable:
					req.Mutability = mutability
				default:
					return usageError{fmt.Errorf("--mutability %q: want mutable, append-only or immutable", mutability)}
				}
			}
			if f.Changed("keep") {
				if keep == "none" {
					req.Keep = 1
				} else if n, err := strconv.Atoi(keep); err != nil || n < 1 || n > 1000 {
					return usageError{fmt.Errorf("--keep %q: want a number from 1 to 1000, or none", keep)}
				} else {
					req.Keep = n
				}
			}
			info, err := c.SetCheckpointPolicy(cmd.Context(), a[0], agent, a[1], req)
			if err != nil {
				return fmt.Errorf("set policy of checkpoint %s: %w", ref, err)
			}
			return printPolicy(g, a[0], info)
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "named agent within the sandbox")
	cmd.Flags().StringVar(&write, "write", "", "who may write: any, admin, agent or keys=ID1,ID2")
	cmd.Flags().StringVar(&read, "read", "", "who may read: any, admin, agent or keys=ID1,ID2")
	cmd.Flags().StringVar(&mutability, "mutability", "", "mutable, append-only or immutable")
	cmd.Flags().StringVar(&keep, "keep", "", "history depth: N versions, or none (only the latest)")
	return cmd
}

// errNoSuchCheckpoint is reported when a document to show does not exist.
var errNoSuchCheckpoint = &client.APIError{Status: http.StatusNotFound, Detail: "no such checkpoint document"}

// findCheckpoint looks a document up in its sandbox's list.
func findCheckpoint(cmd *cobra.Command, c *client.Client, sandbox, agent, name string) (client.CheckpointInfo, bool, error) {
	list, err := c.ListCheckpoints(cmd.Context(), sandbox)
	if err != nil {
		return client.CheckpointInfo{}, false, err
	}
	for _, d := range list {
		if d.Agent == agent && d.Name == name {
			return d, true, nil
		}
	}
	return client.CheckpointInfo{}, false, nil
}

// parseAccessFlag reads any, admin, agent or keys=ID1,ID2.
func parseAccessFlag(flag, v string) (client.CheckpointAccess, error) {
	switch v {
	case client.AccessAny, client.AccessAdmin, client.AccessAgent:
		return client.CheckpointAccess{Who: v}, nil
	}
	if ids, ok := strings.CutPrefix(v, "keys="); ok {
		var keys []string
		for _, k := range strings.Split(ids, ",") {
			if k = strings.TrimSpace(k); k != "" {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			return client.CheckpointAccess{Who: client.AccessKeys, Keys: keys}, nil
		}
	}
	return client.CheckpointAccess{}, usageError{fmt.Errorf("%s %q: want any, admin, agent or keys=ID1,ID2", flag, v)}
}

func printPolicy(g *globals, sandbox string, d client.CheckpointInfo) error {
	if g.json {
		return printJSON(g.stdout, d)
	}
	_, err := fmt.Fprintf(g.stdout, "%s: write %s, read %s, %s, keep %d\n", docName(sandbox, d.Agent, d.Name),
		accessString(d.Policy.Write), accessString(d.Policy.Read), orDefault(d.Policy.Mutability, client.Mutable), d.Keep)
	return err
}

// policySummary is the POLICY column of checkpoint ls: - for the default.
func policySummary(p client.CheckpointPolicy) string {
	w, r, m := accessString(p.Write), accessString(p.Read), orDefault(p.Mutability, client.Mutable)
	if w == client.AccessAny && r == client.AccessAny && m == client.Mutable {
		return "-"
	}
	return "w:" + w + " r:" + r + " " + m
}

func accessString(a client.CheckpointAccess) string {
	if a.Who == client.AccessKeys {
		return "keys=" + strings.Join(a.Keys, ",")
	}
	return orDefault(a.Who, client.AccessAny)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
