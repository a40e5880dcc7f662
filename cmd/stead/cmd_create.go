package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// newCreateCmd is `stead create`.
func newCreateCmd(g *globals) *cobra.Command {
	var (
		req    client.CreateSandboxRequest
		env    []string
		svc    client.Service
		svcEnv []string
		vols   []string
		labels []string
		netf   createNetworkFlags
		logf   logRotationFlags
	)
	cmd := &cobra.Command{
		Use:   "create [NAME] [flags] [-- SERVICE_COMMAND [ARGS...]]",
		Short: "Create a sandbox",
		Long: `Create a sandbox from a template and start it (unless --no-start).

A command after -- becomes the sandbox's supervised agent service: it is
started with the sandbox, restarted by policy, stopped by its stop hook, and
its log is kept (stead logs, stead attach). The log is rotated at a line
boundary when it would pass --log-max-size (default 64MiB); --log-keep
(default 4) rotated files are kept, compressed, in the sandbox.

--volume mounts a persistent volume (stead volume create) at an absolute
path: NAME:/path, NAME:/path:ro for read-only, or NAME/SUB/PATH:/path to
mount only a sub-directory of it (created if missing). Repeat it to mount
several. Volumes outlive the sandbox: deleting it never deletes them.

--idle-timeout stops the sandbox (or pauses it, with --on-idle pause) after
that long without activity. Activity is: the agent's own API calls through
/run/stead/api.sock (checkpoints, session log, tasks, observations, kv,
orient), writes to its agent state by any caller, exec and its output,
terminal traffic, file access through the API, and cpu use of at least 5% of
a core. Reading its state, logs or info from outside is not.

The sandbox gets an address in the daemon's subnet and the internet, with
only the host, other sandboxes and metadata ranges refused. --no-internet
refuses everything leaving it; --allow (repeatable) makes the policy
default-deny, admitting only its entries; --deny (repeatable) refuses its
entries. Entries are ` + policyEntrySyntax + `.
See stead network. --auto-resume makes a request to an exposed port (stead
port expose) start or resume the sandbox when it is stopped or paused.

--secret NAME gives the tenant's secret NAME (stead secret set) to the
service and every exec as the environment variable NAME (--secret
NAME=VAR names the variable VAR); --secret-file NAME=/run/secrets/FILE
gives it as a file on a tmpfs (mode 0400, owned by the agent, never on the
sandbox's disk). The sandbox keeps the reference, not the value: a new value
reaches every exec at once, and the service and files at the next start.

--failover says what happens when the sandbox's node is lost (a cluster:
stead node): restore (the default) runs it again on another node from its
last push, so what it wrote since is lost (stead show gives the time of its
last push); none leaves it lost.

Exits 4 if a sandbox (deleted ones included) already has the name; nothing
is changed.`,
		Example: `  stead create agent-1
  stead create agent-1 --type medium --idle-timeout 1h --env OPENAI_API_KEY=$KEY
  stead create agent-1 --stop-line /checkpoint -- python3 -m myagent --resume
  stead create agent-1 --volume shared/agents/a1:/data --volume refs:/refs:ro
  stead create agent-1 --allow '*.pypi.org' --allow files.pythonhosted.org --auto-resume
  stead create agent-1 --no-internet
  stead create agent-1 --secret OPENAI_API_KEY --secret-file GH_TOKEN=/run/secrets/gh
  stead create agent-1 --label team=research
  stead create agent-1 --log-max-size 16MiB --log-keep 8 -- ./agent`,
		Args: args(0, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			pos, service := splitAtDash(a, cmd.ArgsLenAtDash())
			if len(pos) > 1 {
				return usageError{fmt.Errorf("create takes at most one NAME, got %q; put the service command after --", pos)}
			}
			if len(pos) == 1 {
				req.Name = pos[0]
			}
			var err error
			if req.Env, err = parseEnv(env); err != nil {
				return err
			}
			if req.Volumes, err = parseVolumes(vols); err != nil {
				return err
			}
			if req.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			req.Network = netf.policy()
			if len(service) > 0 {
				svc.Command = service
				if svc.Env, err = parseEnv(svcEnv); err != nil {
					return err
				}
				svc.Log = logf.config(cmd)
				req.Service = &svc
			} else if cmd.Flags().Changed("restart") || cmd.Flags().Changed("stop-line") || cmd.Flags().Changed("stop-signal") || logf.changed(cmd) {
				return usageError{fmt.Errorf("service flags need a service command after --")}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			sb, err := c.CreateSandbox(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create sandbox: %w", err)
			}
			if g.json {
				return printJSON(g.stdout, sb)
			}
			_, err = fmt.Fprintln(g.stdout, sb.ID)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Template, "template", "", "template id (default host; see stead template ls)")
	f.StringVar(&req.InstanceType, "type", "", "instance type: micro, small (default), medium, large (see stead info)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVar(&req.IdleTimeout, "idle-timeout", "", "stop or pause after this long idle, e.g. 30m (default 15m; 0 disables)")
	f.StringVar(&req.OnIdle, "on-idle", "", "what to do when idle: stop (default) or pause")
	f.StringVar(&req.MaxRuntime, "max-runtime", "", "stop after running this long, e.g. 24h")
	f.BoolVar(&req.NoStart, "no-start", false, "create the sandbox stopped")
	f.StringArrayVarP(&vols, "volume", "v", nil, "mount a persistent volume: "+volumeMountSyntax+" (repeatable)")
	f.BoolVar(&netf.noInternet, "no-internet", false, "refuse all traffic leaving the sandbox (see stead network)")
	f.StringArrayVar(&netf.allow, "allow", nil, "admit only these destinations: address, CIDR or *.domain (repeatable; default-deny)")
	f.StringArrayVar(&netf.deny, "deny", nil, "refuse this destination: address, CIDR or *.domain (repeatable)")
	f.BoolVar(&req.AutoResume, "auto-resume", false, "a request to an exposed port starts or resumes the sandbox")
	f.StringVar(&req.Failover, "failover", "", "when its node is lost: restore (default; on another node, from its last push) or none")
	f.StringArrayVar(&req.Secrets, "secret", nil, "give the tenant's secret NAME as variable NAME, or NAME=VAR as VAR (repeatable)")
	f.StringArrayVar(&req.SecretFiles, "secret-file", nil, "give the tenant's secret as a file: NAME=/run/secrets/FILE (repeatable)")
	f.StringArrayVar(&labels, "label", nil, "label KEY=VALUE (repeatable); keys scoped by --label reach the sandboxes carrying theirs")
	f.StringVar(&svc.User, "service-user", "", "user of the service: agent (default) or root")
	f.StringVar(&svc.Cwd, "service-cwd", "", "working directory of the service")
	f.StringArrayVar(&svcEnv, "service-env", nil, "service environment variable KEY=VALUE (repeatable)")
	f.StringVar(&svc.Restart, "restart", "", "service restart policy: always, on-failure (default), never")
	f.StringVar(&svc.StopSignal, "stop-signal", "", "signal sent to the service on stop (default SIGTERM)")
	f.StringVar(&svc.StopLine, "stop-line", "", "line written to the service's stdin on stop instead of a signal, e.g. /checkpoint")
	f.StringVar(&svc.StopGrace, "stop-grace", "", "time between the stop hook and SIGKILL (default 30s)")
	logf.register(f)
	return cmd
}

// createNetworkFlags are the egress policy flags of stead create.
type createNetworkFlags struct {
	noInternet bool
	allow      []string
	deny       []string
}

// policy is the policy the flags ask for, or nil (the daemon's default)
// when none was given.
func (f createNetworkFlags) policy() *client.NetworkPolicy {
	if !f.noInternet && len(f.allow) == 0 && len(f.deny) == 0 {
		return nil
	}
	p := &client.NetworkPolicy{Allow: f.allow, Deny: f.deny}
	if f.noInternet {
		off := false
		p.Internet = &off
	}
	return p
}
