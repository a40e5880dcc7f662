package e2e

import (
	"testing"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/treedigest"
)

// TestRollbackRestoresTheSnapshotDigestAndForksAreIndependent: a snapshot
// of a running sandbox, work after it, a rollback in place: the root's
// digest equals the snapshot's; the safety snapshot undoes it; forks of
// the snapshot run independently.
func TestRollbackRestoresTheSnapshotDigestAndForksAreIndependent(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "agent", Service: &client.Service{
		Command: []string{"sh", "-c", "echo up; sleep 100000"}, StopGrace: "2s",
	}})
	if err != nil {
		t.Fatal(err)
	}
	writeAgentWork(t, d, sb.ID)
	snap, err := d.c.CreateSnapshot(ctx, sb.ID, client.CreateSnapshotRequest{Label: "hour 4"})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's log (and its time index) grows with each restart of its
	// service; the rest of the root must match exactly.
	opts := digestOpts
	opts.Exclude = append(append([]string(nil), opts.Exclude...), "/var/log/agent.log", "/var/log/.agent.log.idx")
	entries := func(dir string) []string {
		e, err := treedigest.Entries(ctx, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	snapDigest, err := treedigest.Entries(ctx, d.dataDir+"/pool/snapshots/"+snap.ID, opts)
	if err != nil {
		t.Fatal(err)
	}
	d.sh(ctx, sb.ID, "agent", "echo 'step 7: broke everything' >> /workspace/plan.md; rm -rf /home/agent/notes; echo new > /data/extra")
	afterWork := entries(d.rootDir(sb.ID))

	res, err := d.c.Rollback(ctx, sb.ID, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.ID != sb.ID || res.Sandbox.State != "running" {
		t.Fatalf("rollback: %+v", res.Sandbox)
	}
	if diff := treedigest.Diff(snapDigest, entries(d.rootDir(sb.ID))); len(diff) > 0 {
		t.Fatalf("root after rollback differs from the snapshot (%d lines):\n%q", len(diff), diff)
	}
	if countLines(logText(t, d, sb.ID), "up") < 2 {
		t.Fatalf("the agent service was not restarted; log:\n%s", logText(t, d, sb.ID))
	}
	// The safety snapshot undoes the rollback.
	if _, err := d.c.Rollback(ctx, sb.ID, res.Safety.ID); err != nil {
		t.Fatal(err)
	}
	if diff := treedigest.Diff(afterWork, entries(d.rootDir(sb.ID))); len(diff) > 0 {
		t.Fatalf("rolling back to the safety snapshot did not restore the replaced root: %q", diff)
	}
	// Forks: new ids, same files, independent.
	forks, err := d.c.Fork(ctx, snap.ID, client.ForkRequest{Count: 3})
	if err != nil || len(forks) != 3 {
		t.Fatalf("fork: %v %v", forks, err)
	}
	for i, f := range forks {
		if f.ID == sb.ID || f.State != "running" {
			t.Fatalf("fork %d: %+v", i, f)
		}
		if got := d.sh(ctx, f.ID, "agent", "cat /workspace/plan.md"); got != "# plan: step 1 done\n" {
			t.Fatalf("fork %d reads %q", i, got)
		}
	}
	d.sh(ctx, forks[0].ID, "agent", "echo variant-a > /workspace/plan.md")
	if got := d.sh(ctx, forks[1].ID, "agent", "cat /workspace/plan.md"); got != "# plan: step 1 done\n" {
		t.Fatalf("forks share files: %q", got)
	}
	list, err := d.c.ListSnapshots(ctx, "")
	if err != nil || len(list) < 3 {
		t.Fatalf("snapshot list: %v %v", list, err)
	}
	// Snapshots outlive their sandbox.
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if more, err := d.c.Fork(ctx, snap.ID, client.ForkRequest{NoStart: true}); err != nil || len(more) != 1 {
		t.Fatalf("fork after the sandbox's purge: %v %v", more, err)
	}
}
