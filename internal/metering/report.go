package metering

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/stead-dev/stead/client"
	"github.com/stead-dev/stead/internal/errs"
	"github.com/stead-dev/stead/internal/store"
)

// Report answers a usage query for tenant (q.Tenant is the caller's
// business: the API checks it and passes the tenant here). Running time
// comes from the intervals (an open one counts to now), storage from the
// per-day rows (a day is the smallest unit: a report from the middle of a
// day counts that day's storage whole). An unknown tenant, and a sandbox
// of another tenant, are errs.ErrNotFound, as an absent one.
func (m *Meter) Report(ctx context.Context, tenant string, q client.UsageQuery) (client.UsageReport, error) {
	now := m.now()
	until := q.Until.UTC()
	if until.IsZero() || until.After(now) {
		until = now
	}
	since := q.Since.UTC()
	if since.IsZero() {
		since = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	if !since.Before(until) {
		return client.UsageReport{}, fmt.Errorf("usage: since %s is not before until %s: %w", since.Format(time.RFC3339), until.Format(time.RFC3339), errs.ErrInvalid)
	}
	switch q.By {
	case "", "day", "sandbox":
	default:
		return client.UsageReport{}, fmt.Errorf("usage: by %q (want day or sandbox): %w", q.By, errs.ErrInvalid)
	}
	if _, err := m.st.GetTenant(ctx, tenant); err != nil {
		return client.UsageReport{}, fmt.Errorf("usage of tenant %s: %w", tenant, err)
	}
	// Sandboxes the tenant has (deleted ones included), for names, lives
	// and the always-on comparison.
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenant, IncludeDeleted: true})
	if err != nil {
		return client.UsageReport{}, fmt.Errorf("usage: %w", err)
	}
	byID := map[string]store.Sandbox{}
	for _, sb := range sbs {
		byID[sb.ID] = sb
	}
	sandboxID := ""
	if q.Sandbox != "" {
		sb, err := m.st.GetSandbox(ctx, tenant, q.Sandbox)
		switch {
		case err == nil:
			sandboxID = sb.ID
		case errors.Is(err, errs.ErrNotFound):
			sandboxID = q.Sandbox // purged: its intervals are kept by id
		default:
			return client.UsageReport{}, fmt.Errorf("usage: %w", err)
		}
	}
	ivs, err := m.st.ListMeterIntervals(ctx, store.MeterFilter{TenantID: tenant, SandboxID: sandboxID, Since: since})
	if err != nil {
		return client.UsageReport{}, fmt.Errorf("usage: %w", err)
	}
	if sandboxID != "" && len(ivs) == 0 {
		if _, known := byID[sandboxID]; !known {
			return client.UsageReport{}, fmt.Errorf("usage: sandbox %s: %w", q.Sandbox, errs.ErrNotFound)
		}
	}
	storage, err := m.st.ListStorageUsage(ctx, tenant, since)
	if err != nil {
		return client.UsageReport{}, fmt.Errorf("usage: %w", err)
	}

	r := client.UsageReport{Tenant: tenant, Since: since, Until: until, By: q.By, Currency: "USD", Prices: m.prices,
		Interval: m.opts.Interval.String(), Rows: []client.UsageLine{}}
	rows := map[string]*client.UsageLine{}
	row := func(key string, init func(*client.UsageLine)) *client.UsageLine {
		if l, ok := rows[key]; ok {
			return l
		}
		l := &client.UsageLine{}
		init(l)
		rows[key] = l
		return l
	}
	lineFor := func(day time.Time, sandbox, subject string) *client.UsageLine {
		switch q.By {
		case "day":
			d := day.Format(time.DateOnly)
			return row(d, func(l *client.UsageLine) { l.Day = d })
		case "sandbox":
			key := sandbox + "\x00" + subject
			return row(key, func(l *client.UsageLine) {
				l.Sandbox, l.Subject = sandbox, subject
				if sb, ok := byID[sandbox]; ok {
					l.SandboxName = sb.Name
					l.InstanceType = specOf(sb).InstanceType
				}
			})
		}
		return nil
	}
	addCompute := func(l *client.UsageLine, iv store.MeterInterval, secs float64) {
		if l == nil {
			return
		}
		l.RunningSeconds += secs
		if l.ComputeSeconds == nil {
			l.ComputeSeconds = map[string]float64{}
		}
		l.ComputeSeconds[iv.InstanceType] += secs
		l.MemoryGiBSeconds += secs * float64(iv.MemoryBytes) / (1 << 30)
		l.ComputeCost += secs / 3600 * hourly(m.prices, iv.InstanceType, iv.CPUs, iv.MemoryBytes)
		if l.InstanceType == "" && q.By == "sandbox" {
			l.InstanceType = iv.InstanceType
		}
	}
	firstSeen := map[string]time.Time{}
	lastSeen := map[string]time.Time{}
	lastIv := map[string]store.MeterInterval{}
	for _, iv := range ivs {
		end := iv.Checkpoint
		if iv.Open {
			end = now
		}
		if f, ok := firstSeen[iv.SandboxID]; !ok || iv.Start.Before(f) {
			firstSeen[iv.SandboxID] = iv.Start
		}
		if end.After(lastSeen[iv.SandboxID]) {
			lastSeen[iv.SandboxID] = end
		}
		lastIv[iv.SandboxID] = iv
		for _, p := range split(iv.Start, end, since, until) {
			secs := p.end.Sub(p.start).Seconds()
			addCompute(&r.Total, iv, secs)
			addCompute(lineFor(p.start, iv.SandboxID, ""), iv, secs)
		}
	}
	for _, u := range storage {
		if !u.Day.Before(until) {
			continue
		}
		if sandboxID != "" && u.Subject != sandboxID {
			continue
		}
		gbh := u.ByteSeconds / 1e9 / 3600
		sandbox, subject := u.Subject, ""
		if _, ok := byID[u.Subject]; !ok {
			sandbox, subject = "", u.Subject
			if u.Kind == store.StorageRepository && subject == "" {
				subject = "repository"
			}
		}
		for _, l := range []*client.UsageLine{&r.Total, lineFor(u.Day, sandbox, subject)} {
			if l == nil {
				continue
			}
			switch u.Kind {
			case store.StoragePool:
				l.PoolGBHours += gbh
				l.StorageCost += gbh / HoursPerMonth * m.prices.LocalGBMonth
			case store.StorageSnapshots:
				l.SnapshotGBHours += gbh
				l.StorageCost += gbh / HoursPerMonth * m.prices.LocalGBMonth
			case store.StorageRepository:
				l.RepositoryGBHours += gbh
				l.StorageCost += gbh / HoursPerMonth * m.prices.RepositoryGBMonth
			}
		}
	}
	finish := func(l *client.UsageLine) {
		l.Cost = round6(l.ComputeCost + l.StorageCost)
		l.ComputeCost, l.StorageCost = round6(l.ComputeCost), round6(l.StorageCost)
	}
	finish(&r.Total)
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		finish(rows[k])
		r.Rows = append(r.Rows, *rows[k])
	}

	// Always-on: every sandbox running from its creation (or since) to
	// its deletion (or until); a purged one from its first to its last
	// metered moment.
	ao := client.AlwaysOn{ActualCost: r.Total.Cost}
	aoCompute := 0.0
	life := func(from, to time.Time, typ string, cpus float64, mem int64) {
		from, to = maxTime(from, since), minTime(to, until)
		if !to.After(from) {
			return
		}
		secs := to.Sub(from).Seconds()
		ao.RunningSeconds += secs
		aoCompute += secs / 3600 * hourly(m.prices, typ, cpus, mem)
	}
	for _, sb := range sbs {
		if sandboxID != "" && sb.ID != sandboxID {
			continue
		}
		end := until
		if sb.DeletedAt != nil {
			end = *sb.DeletedAt
		}
		sp := specOf(sb)
		life(sb.CreatedAt, end, sp.InstanceType, sp.Limits.CPUs, sp.Limits.MemoryBytes)
	}
	for id, iv := range lastIv {
		if _, ok := byID[id]; ok {
			continue
		}
		life(firstSeen[id], lastSeen[id], iv.InstanceType, iv.CPUs, iv.MemoryBytes)
	}
	ao.Cost = round6(aoCompute + r.Total.StorageCost)
	ao.Saving = round6(ao.Cost - ao.ActualCost)
	if ao.Cost > 0 {
		ao.SavingPercent = math.Round(ao.Saving/ao.Cost*1000) / 10
	}
	r.AlwaysOn = ao
	return r, nil
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

type span struct{ start, end time.Time }

// split clips [start, end) to [since, until) and cuts it at UTC midnights.
func split(start, end, since, until time.Time) []span {
	start, end = maxTime(start, since), minTime(end, until)
	var out []span
	for end.After(start) {
		y, mo, d := start.UTC().Date()
		next := time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
		e := minTime(end, next)
		out = append(out, span{start, e})
		start = e
	}
	return out
}
