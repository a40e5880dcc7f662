package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/store/sqlite"
)

// TestScheduleCommandsOnARealDaemon: through the CLI, a schedule is added
// to a sandbox with its next run times shown, ls shows three of them (at
// 03:00 Berlin time on the 1st), an invalid expression or zone is refused
// with the parser's reason and stores nothing, pause and resume work, rm
// removes. Another tenant sees none of it; a read-only key lists but does
// not add. A purge takes the sandbox's schedules along.
func TestScheduleCommandsOnARealDaemon(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "cron-box", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := d.cli("schedule", "add", "cron-box", "--cron", "0 3 1 * *", "--action", "restart", "--tz", "Europe/Berlin")
	if code != 0 || !strings.Contains(out, "added: restart of cron-box") || !strings.Contains(out, "next runs:") {
		t.Fatalf("add: exit %d %q %q", code, out, errOut)
	}
	id := strings.Fields(strings.TrimPrefix(out, "schedule "))[0]

	code, out, errOut = d.cli("schedule", "ls", "cron-box", "--json")
	var list []client.Schedule
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("ls --json: exit %d %q %q", code, out, errOut)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if len(list[0].NextRuns) != 3 {
		t.Fatalf("next runs %v, want 3", list[0].NextRuns)
	}
	prev := time.Now()
	for _, r := range list[0].NextRuns {
		l := r.In(berlin)
		if l.Day() != 1 || l.Hour() != 3 || l.Minute() != 0 || !r.After(prev) {
			t.Fatalf("next runs %v: want 03:00 Berlin on the 1st, ascending, in the future", list[0].NextRuns)
		}
		prev = r
	}
	code, out, _ = d.cli("schedule", "ls")
	if code != 0 || !strings.Contains(out, "NEXT RUNS") || !strings.Contains(out, id) || !strings.Contains(out, "cron-box") ||
		strings.Count(out, ":00 CE") != 3 {
		t.Fatalf("ls: exit %d\n%s", code, out)
	}

	for _, bad := range [][]string{
		{"--cron", "0 3 1 *", "--action", "stop"},
		{"--cron", "0 3 1 * *", "--action", "stop", "--tz", "Mars/Olympus"},
		{"--cron", "0 25 * * *", "--action", "stop"},
		{"--cron", "@daily", "--action", "reboot"},
	} {
		code, out, errOut := d.cli(append([]string{"schedule", "add", "cron-box"}, bad...)...)
		if code == 0 || !strings.Contains(errOut, "400") && !strings.Contains(errOut, "422") {
			t.Errorf("add %v: exit %d %q %q, want a refusal", bad, code, out, errOut)
		}
	}
	if _, _, errOut := d.cli("schedule", "add", "cron-box", "--cron", "0 3 1 *", "--action", "stop"); !strings.Contains(errOut, "has 4 fields") {
		t.Errorf("invalid cron does not say why: %q", errOut)
	}
	if _, _, errOut := d.cli("schedule", "add", "cron-box", "--cron", "0 3 * * *", "--action", "stop", "--tz", "Mars/Olympus"); !strings.Contains(errOut, "Mars/Olympus") {
		t.Errorf("invalid zone does not say why: %q", errOut)
	}
	if all, err := d.c.ListAllSchedules(ctx); err != nil || len(all) != 1 {
		t.Fatalf("after refused adds: %+v %v", all, err)
	}

	if code, out, _ := d.cli("schedule", "pause", "cron-box", id); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("pause: %d %q", code, out)
	}
	if l, _ := d.c.ListSchedules(ctx, "cron-box"); l[0].Enabled || len(l[0].NextRuns) != 0 {
		t.Fatalf("paused: %+v", l[0])
	}
	if code, out, _ := d.cli("schedule", "resume", "cron-box", id); code != 0 || !strings.Contains(out, "next runs:") {
		t.Fatalf("resume: %d %q", code, out)
	}

	// Another tenant: the sandbox and the schedule are absent.
	if _, err := d.c.CreateTenant(ctx, client.CreateTenantRequest{ID: "other", Name: "Other"}); err != nil {
		t.Fatal(err)
	}
	ok, err := d.c.WithTenant("other").CreateKey(ctx, client.CreateAPIKeyRequest{Name: "o", Role: client.RoleTenantAdmin})
	if err != nil {
		t.Fatal(err)
	}
	other := keyClient(t, d, ok.Secret)
	if _, err := other.ListSchedules(ctx, sb.ID); !client.IsNotFound(err) {
		t.Fatalf("another tenant lists: %v", err)
	}
	if err := other.DeleteSchedule(ctx, sb.ID, id); !client.IsNotFound(err) {
		t.Fatalf("another tenant deletes: %v", err)
	}
	if l, err := other.ListAllSchedules(ctx); err != nil || len(l) != 0 {
		t.Fatalf("another tenant's list: %+v %v", l, err)
	}
	// A read-only key lists, and may not add.
	rk, err := d.c.CreateKey(ctx, client.CreateAPIKeyRequest{Name: "ro", Role: client.RoleReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	ro := keyClient(t, d, rk.Secret)
	if l, err := ro.ListSchedules(ctx, "cron-box"); err != nil || len(l) != 1 {
		t.Fatalf("read-only list: %+v %v", l, err)
	}
	if _, err := ro.CreateSchedule(ctx, "cron-box", client.CreateScheduleRequest{Cron: "@daily", Action: "stop"}); !client.IsForbidden(err) {
		t.Fatalf("read-only add: %v", err)
	}

	if code, out, errOut := d.cli("schedule", "rm", "cron-box", id); code != 0 || out != "schedule "+id+" removed\n" {
		t.Fatalf("rm: %d %q %q", code, out, errOut)
	}
	if code, _, _ := d.cli("schedule", "rm", "cron-box", id); code != 3 {
		t.Fatalf("rm twice: exit %d, want 3 (not found)", code)
	}

	// A purge takes the sandbox's schedules along.
	if _, err := d.c.CreateSchedule(ctx, "cron-box", client.CreateScheduleRequest{Cron: "@daily", Action: "snapshot"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
		t.Fatal(err)
	}
	if all, err := d.c.ListAllSchedules(ctx); err != nil || len(all) != 0 {
		t.Fatalf("after the purge: %+v %v", all, err)
	}
}

// TestMissedRunRunsOnceWhenTheDaemonIsBack: a schedule whose run time
// passed three days ago while the daemon was down (its next run time moved
// back in the stopped daemon's store) runs once, at start-up, and is then
// due again at its next time after now.
func TestMissedRunRunsOnceWhenTheDaemonIsBack(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	sb, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: "late", NoStart: true})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := d.c.CreateSchedule(ctx, "late", client.CreateScheduleRequest{Cron: "@daily", Action: "snapshot"})
	if err != nil {
		t.Fatal(err)
	}
	d.stopGracefully()
	st, err := sqlite.Open(context.Background(), filepath.Join(d.dataDir, "stead.db"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := st.ListSchedules(ctx, "", "")
	if err != nil || len(list) != 1 || list[0].ID != sc.ID {
		t.Fatalf("stored schedules %+v %v", list, err)
	}
	missed := time.Now().Add(-72 * time.Hour).UTC().Truncate(24 * time.Hour)
	list[0].NextRunAt = &missed
	if _, err := st.UpdateSchedule(ctx, list[0]); err != nil {
		t.Fatal(err)
	}
	st.Close()

	d.start()
	// Under the 15 s tick: the run comes from the tick at start-up.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := d.c.ListSchedules(ctx, "late")
		if err == nil && len(l) == 1 && l[0].LastRunAt != nil {
			if l[0].LastResult != "ok" || len(l[0].NextRuns) != 3 || !l[0].NextRuns[0].After(time.Now()) {
				t.Fatalf("after the start-up run: %+v", l[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the missed run did not run at start-up: %+v %v\n%s", l, err, d.logText())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // room for a wrong second or third run
	snaps, err := d.c.ListSnapshots(ctx, sb.ID)
	if err != nil || len(snaps) != 1 || !strings.HasPrefix(snaps[0].Label, "sched-"+sc.ID+"-") {
		t.Fatalf("snapshots after three missed days: %+v %v (want exactly one, by the schedule)", snaps, err)
	}
}
