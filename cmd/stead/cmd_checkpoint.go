package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

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
A document may have a JSON Schema that every write must pass.`,
		Example: `  stead checkpoint put agent-1 plan plan.json --run run-7
  echo '{"step": 3}' | stead checkpoint put agent-1 plan - --if-match 2
  stead checkpoint get agent-1 plan > plan.json
  stead checkpoint get agent-1 plan --version 1 --json
  stead checkpoint ls agent-1
  stead checkpoint history agent-1 plan
  stead checkpoint rollback agent-1 plan 1
  stead checkpoint schema agent-1 plan plan.schema.json
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
			row(tw, "AGENT", "NAME", "VERSION", "KEPT", "KEEP", "SCHEMA", "UPDATED")
			for _, d := range list {
				schema := "-"
				if len(d.Schema) > 0 {
					schema = "yes"
				}
				row(tw, orDash(d.Agent), d.Name, strconv.FormatInt(d.Version, 10),
					strconv.Itoa(d.Versions), strconv.Itoa(d.Keep), schema, ago(d.UpdatedAt))
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
