package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stead-dev/stead/internal/errs"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// TestParseAndNextRunTimes: valid expressions give the run times cron
// would, in their zone, returned in UTC.
func TestParseAndNextRunTimes(t *testing.T) {
	for _, tc := range []struct {
		expr, tz, after string
		want            []string
	}{
		{"0 3 1 * *", "", "2026-12-01T02:00:00Z", []string{"2026-12-01T03:00:00Z", "2027-01-01T03:00:00Z", "2027-02-01T03:00:00Z"}},
		{"@monthly", "", "2026-12-15T10:00:00Z", []string{"2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"}},
		{"@daily", "", "2026-12-01T00:00:00Z", []string{"2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z"}},
		{"@midnight", "", "2026-12-01T00:00:00Z", []string{"2026-12-02T00:00:00Z"}},
		{"@hourly", "", "2026-12-01T00:30:00Z", []string{"2026-12-01T01:00:00Z", "2026-12-01T02:00:00Z"}},
		{"@weekly", "", "2026-12-01T00:00:00Z", []string{"2026-12-06T00:00:00Z", "2026-12-13T00:00:00Z"}}, // Sundays
		{"@yearly", "", "2026-12-01T00:00:00Z", []string{"2027-01-01T00:00:00Z"}},
		{"*/15 * * * *", "UTC", "2026-12-01T00:07:00Z", []string{"2026-12-01T00:15:00Z", "2026-12-01T00:30:00Z"}},
		{"30 2 * * mon-fri", "", "2026-12-04T03:00:00Z", []string{"2026-12-07T02:30:00Z", "2026-12-08T02:30:00Z"}}, // Fri → Mon
		// Berlin is UTC+1 in winter, UTC+2 in summer.
		{"0 3 1 * *", "Europe/Berlin", "2026-12-01T00:00:00Z", []string{"2026-12-01T02:00:00Z", "2027-01-01T02:00:00Z"}},
		{"0 3 1 7 *", "Europe/Berlin", "2026-12-01T00:00:00Z", []string{"2027-07-01T01:00:00Z"}},
		// Strictly after: a time that is a run time is not returned.
		{"0 3 * * *", "", "2026-12-01T03:00:00Z", []string{"2026-12-02T03:00:00Z"}},
		{"  0 3 * * *  ", "", "2026-12-01T03:00:00Z", []string{"2026-12-02T03:00:00Z"}},
	} {
		sp, err := Parse(tc.expr, tc.tz)
		if err != nil {
			t.Errorf("Parse(%q, %q): %v", tc.expr, tc.tz, err)
			continue
		}
		got := sp.NextN(utc(tc.after), len(tc.want))
		if len(got) != len(tc.want) {
			t.Errorf("%q in %q after %s: %v, want %v", tc.expr, tc.tz, tc.after, got, tc.want)
			continue
		}
		for i, w := range tc.want {
			if !got[i].Equal(utc(w)) || got[i].Location() != time.UTC {
				t.Errorf("%q in %q after %s: run %d is %v, want %s", tc.expr, tc.tz, tc.after, i, got[i], w)
			}
		}
		if want := tc.tz; want == "" && sp.TZ != "UTC" || want != "" && sp.TZ != want {
			t.Errorf("%q: TZ %q", tc.expr, sp.TZ)
		}
	}
}

// TestParseRejectsBadInputWithTheReason: each bad expression or zone is
// errs.ErrInvalid with a message that says what is wrong.
func TestParseRejectsBadInputWithTheReason(t *testing.T) {
	for _, tc := range []struct {
		expr, tz, says string
	}{
		{"", "", "empty"},
		{"   ", "", "empty"},
		{"0 3 * *", "", "has 4 fields"},
		{"0 0 3 * * *", "", "has 6 fields"},
		{"61 * * * *", "", "above maximum"},
		{"* 25 * * *", "", "above maximum"},
		{"0 3 32 * *", "", "above maximum"},
		{"0 3 * 13 *", "", "above maximum"},
		{"0 3 * * 8", "", "above maximum"},
		{"a b c d e", "", "failed to parse"},
		{"0 3 * * *", "Mars/Olympus", "time zone \"Mars/Olympus\""},
		{"0 3 * * *", "Local", "Local"},
		{"0 3 * * *", "../../etc/passwd", "time zone"},
		{"TZ=UTC 0 3 * * *", "", "own field"},
		{"CRON_TZ=Europe/Berlin 0 3 * * *", "", "own field"},
		{"CRON_TZ=x", "", "own field"},
		{"@every 1h", "", "unknown descriptor"},
		{"@fortnightly", "", "unknown descriptor"},
		{"0 0 30 2 *", "", "never fires"},
		{"0 3 * * *\n", "", ""}, // trailing space is trimmed: valid, see below
		{"0 3\x00 * * *", "", "control character"},
		{strings.Repeat("1,", 150) + "1 * * * *", "", "longer than"},
	} {
		_, err := Parse(tc.expr, tc.tz)
		if tc.says == "" {
			if err != nil {
				t.Errorf("Parse(%q, %q): %v", tc.expr, tc.tz, err)
			}
			continue
		}
		if !errors.Is(err, errs.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Parse(%q, %q) = %v, want ErrInvalid saying %q", tc.expr, tc.tz, err, tc.says)
		}
	}
}

// TestDaylightSavingSkipsAndRepeatsRunOnce: 02:30 does not exist in
// Berlin on the last Sunday of March and exists twice on the last Sunday
// of October; each day has at most one run.
func TestDaylightSavingSkipsAndRepeatsRunOnce(t *testing.T) {
	sp, err := Parse("30 2 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	spring := sp.NextN(utc("2027-03-27T12:00:00Z"), 2)
	if !spring[0].Equal(utc("2027-03-29T00:30:00Z")) {
		t.Errorf("spring forward: %v (want the skipped day without a run)", spring)
	}
	autumn := sp.NextN(utc("2027-10-30T12:00:00Z"), 2)
	if autumn[0].Equal(autumn[1].Add(-time.Hour)) || autumn[1].Sub(autumn[0]) < 20*time.Hour {
		t.Errorf("fall back: %v (want one run per day)", autumn)
	}
}

// FuzzParse: validation never panics, and what it accepts has a next run
// time after any instant of the next decades, in UTC and strictly later.
func FuzzParse(f *testing.F) {
	for _, seed := range [][2]string{
		{"0 3 1 * *", ""}, {"@monthly", "Europe/Berlin"}, {"*/5 * * * *", "UTC"},
		{"0 0 30 2 *", ""}, {"CRON_TZ=", ""}, {"TZ=x", ""}, {"@every 1s", ""},
		{"1-5/2 1,2,3 ? jan-mar sun", "America/New_York"}, {"0 3 * * *", "Local"},
		{"* * * * *", "../zoneinfo"}, {"5-1 * * * *", ""}, {"*/0 * * * *", ""},
		{"0 0 29 2 *", "Asia/Kolkata"}, {"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, expr, tz string) {
		sp, err := Parse(expr, tz)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("Parse(%q, %q): error %v is not ErrInvalid", expr, tz, err)
			}
			return
		}
		from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		next := sp.Next(from)
		if next.IsZero() || !next.After(from) || next.Location() != time.UTC {
			t.Fatalf("Parse(%q, %q) accepted, but Next(%v) = %v", expr, tz, from, next)
		}
		if again, err := Parse(sp.Expr, sp.TZ); err != nil || !again.Next(from).Equal(next) {
			t.Fatalf("the normalized form %q %q does not parse alike: %v", sp.Expr, sp.TZ, err)
		}
	})
}
