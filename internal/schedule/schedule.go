// Package schedule holds the cron expressions of sandbox schedules: their
// validation (Parse) and their run times (Spec.Next, Spec.NextN). It does
// no I/O beyond reading the time zone database; the scheduler that fires
// schedules lives in the sandbox service.
//
// An expression is a standard five-field crontab line (minute, hour, day
// of month, month, day of week; ranges, lists, steps and month and weekday
// names as cron knows them) or one of the descriptors @yearly (@annually),
// @monthly, @weekly, @daily (@midnight) and @hourly. It is read in an IANA
// time zone (default UTC): "0 3 * * *" in Europe/Berlin is 03:00 Berlin
// time, whatever the offset that day. A time that a daylight-saving jump
// skips does not occur that day; one that it repeats runs at its first
// occurrence only.
package schedule

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // zones on hosts without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/stead-dev/stead/internal/errs"
)

// MaxExprLen is the longest cron expression accepted.
const MaxExprLen = 200

// MaxTZLen is the longest time zone name accepted.
const MaxTZLen = 64

// parser reads five fields or a descriptor.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// descriptors are the accepted @ forms (robfig's parser also knows @every,
// which is an interval, not a time of day: backup-policy --every is that).
var descriptors = map[string]bool{
	"@yearly": true, "@annually": true, "@monthly": true, "@weekly": true,
	"@daily": true, "@midnight": true, "@hourly": true,
}

// Spec is a parsed cron expression in its time zone.
type Spec struct {
	// Expr is the expression as given, trimmed.
	Expr string
	// TZ is the zone's IANA name ("UTC" when none was given).
	TZ string

	loc   *time.Location
	sched *cron.SpecSchedule
}

// Parse validates expr in time zone tz ("" means UTC) and returns its
// Spec. A bad expression, an unknown zone, "Local" (it would depend on the
// daemon's host), a TZ= prefix inside expr (the zone is its own field) and
// an expression that never fires (such as "0 0 30 2 *") are errs.ErrInvalid,
// with the parser's own message.
func Parse(expr, tz string) (Spec, error) {
	expr = strings.TrimSpace(expr)
	tz = strings.TrimSpace(tz)
	switch {
	case expr == "":
		return Spec{}, fmt.Errorf("cron expression is empty (want five fields, e.g. \"0 3 * * *\", or @daily): %w", errs.ErrInvalid)
	case len(expr) > MaxExprLen:
		return Spec{}, fmt.Errorf("cron expression is longer than %d bytes: %w", MaxExprLen, errs.ErrInvalid)
	case len(tz) > MaxTZLen:
		return Spec{}, fmt.Errorf("time zone is longer than %d bytes: %w", MaxTZLen, errs.ErrInvalid)
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return Spec{}, fmt.Errorf("cron expression %q: give the time zone as its own field (tz), not in the expression: %w", expr, errs.ErrInvalid)
	case strings.HasPrefix(expr, "@") && !descriptors[expr]:
		return Spec{}, fmt.Errorf("cron expression %q: unknown descriptor (want @yearly, @monthly, @weekly, @daily or @hourly): %w", expr, errs.ErrInvalid)
	}
	for _, r := range expr {
		if r < ' ' && r != '\t' || r == 0x7f {
			return Spec{}, fmt.Errorf("cron expression has a control character: %w", errs.ErrInvalid)
		}
	}
	if n := len(strings.Fields(expr)); !strings.HasPrefix(expr, "@") && n != 5 {
		return Spec{}, fmt.Errorf("cron expression %q has %d fields, want 5 (minute hour day-of-month month day-of-week): %w", expr, n, errs.ErrInvalid)
	}
	loc, name, err := location(tz)
	if err != nil {
		return Spec{}, err
	}
	s, err := parse(expr)
	if err != nil {
		return Spec{}, fmt.Errorf("cron expression %q: %v: %w", expr, err, errs.ErrInvalid)
	}
	ss, ok := s.(*cron.SpecSchedule)
	if !ok {
		return Spec{}, fmt.Errorf("cron expression %q is not a time-of-day schedule: %w", expr, errs.ErrInvalid)
	}
	ss.Location = loc
	sp := Spec{Expr: expr, TZ: name, loc: loc, sched: ss}
	// A probe from a fixed instant: the parser's search gives up after
	// five years, so a date that never comes is found here.
	if sp.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return Spec{}, fmt.Errorf("cron expression %q never fires: %w", expr, errs.ErrInvalid)
	}
	return sp, nil
}

// parse is the parser's Parse with a panic (a parser bug on odd input)
// turned into an error.
func parse(expr string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("unparsable (%v)", r)
		}
	}()
	return parser.Parse(expr)
}

// location loads the IANA zone tz ("" is UTC).
func location(tz string) (*time.Location, string, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, "UTC", nil
	}
	if tz == "Local" {
		return nil, "", fmt.Errorf("time zone Local depends on the daemon's host: name a zone (e.g. Europe/Berlin) or leave it empty for UTC: %w", errs.ErrInvalid)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, "", fmt.Errorf("time zone %q: %v (want an IANA name such as Europe/Berlin): %w", tz, err, errs.ErrInvalid)
	}
	return loc, tz, nil
}

// Location returns the spec's time zone.
func (s Spec) Location() *time.Location { return s.loc }

// Next returns the first run time strictly after t, in UTC, or the zero
// time if there is none within five years of t.
func (s Spec) Next(t time.Time) time.Time {
	if s.sched == nil {
		return time.Time{}
	}
	n := s.sched.Next(t)
	if !n.IsZero() && s.repeated(n) {
		// The second occurrence of a wall-clock time a fall-back jump
		// repeats: that time has had its run.
		n = s.sched.Next(n)
	}
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// repeated reports whether instant n shows the same wall-clock minute in
// the spec's zone as an instant shortly before it (a daylight-saving
// fall-back: one hour, or half an hour in a few zones).
func (s Spec) repeated(n time.Time) bool {
	wall := func(t time.Time) [5]int {
		t = t.In(s.loc)
		return [5]int{t.Year(), int(t.Month()), t.Day(), t.Hour(), t.Minute()}
	}
	for _, d := range []time.Duration{30 * time.Minute, time.Hour} {
		if wall(n.Add(-d)) == wall(n) {
			return true
		}
	}
	return false
}

// NextN returns up to n run times after t, in order, in UTC.
func (s Spec) NextN(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for range n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}
