package sandbox

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/events"
)

// opEventTypes names the event each kind of operation emits when it
// succeeds and when it fails (false: none). An archive's success is the
// lifecycle's sandbox.archived (the store's transition).
func opEventTypes(kind string) ([2]string, bool) {
	switch kind {
	case "push":
		return [2]string{events.BackupPushed, "backup.push_failed"}, true
	case "pull":
		return [2]string{events.BackupPulled, "backup.pull_failed"}, true
	case "restore":
		return [2]string{events.BackupRestored, "backup.restore_failed"}, true
	case "restore-path":
		return [2]string{"backup.files_restored", "backup.files_restore_failed"}, true
	case "volume-push":
		return [2]string{"volume.pushed", "volume.push_failed"}, true
	case "volume-restore":
		return [2]string{"volume.restored", "volume.restore_failed"}, true
	case "archive":
		return [2]string{"", "backup.archive_failed"}, true
	case "hydrate":
		return [2]string{events.SandboxHydrated, "sandbox.hydrate_failed"}, true
	case "drill":
		return [2]string{events.DrillPassed, events.DrillFailed}, true
	case "check":
		return [2]string{"repo.checked", "repo.check_failed"}, true
	case "repair":
		return [2]string{"repo.repaired", "repo.repair_failed"}, true
	case "prune":
		return [2]string{"repo.pruned", "repo.prune_failed"}, true
	}
	return [2]string{}, false
}

// opEvent emits the event of a finished operation: its id, target and the
// scalar fields of its result (bytes, seconds, ids) as data, or its error.
func (s *Service) opEvent(ctx context.Context, op *operation, res any, err error) {
	v := op.snapshot()
	types, ok := opEventTypes(v.Kind)
	if !ok {
		return
	}
	data := map[string]string{"operation": v.ID}
	if v.Target != "" {
		data["target"] = v.Target
	}
	sandbox := op.sandbox
	typ := types[0]
	if err != nil {
		typ = types[1]
		data["error"] = errs.Message(err)
	} else if res != nil {
		raw, _ := json.Marshal(res)
		var fields map[string]any
		_ = json.Unmarshal(raw, &fields)
		for k, f := range fields {
			switch f := f.(type) {
			case bool:
				data[k] = strconv.FormatBool(f)
			case float64: // not %v: 12000000 must not read 1.2e+07
				data[k] = strconv.FormatFloat(f, 'f', -1, 64)
			case string:
				if len(f) <= 200 && k != "verify_output" {
					data[k] = f
				}
			case map[string]any: // a nested record: its id
				if id, ok := f["id"].(string); ok {
					data[k] = id
					if k == "sandbox" && sandbox == "" {
						sandbox = id // a restore's new sandbox
					}
				}
			}
		}
		if v.Kind == "drill" && fields["ok"] != true {
			typ = types[1]
		}
	}
	if typ != "" {
		s.event(ctx, typ, op.tenant, sandbox, data)
	}
}
