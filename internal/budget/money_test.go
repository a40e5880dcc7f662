package budget

import (
	"errors"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
)

func TestParseUSDReadsDecimalsExactly(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"5", 5_000_000}, {"5.00", 5_000_000}, {"$5.5", 5_500_000}, {"0.000001", 1}, {".25", 250_000},
		{" 12.345678 ", 12_345_678}, {"1000000000", 1_000_000_000_000_000}, {"0", 0},
	} {
		got, err := ParseUSD(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "$", ".", "5.", "-1", "+1", "1e3", "5.0000001", "1,5", "5.00 USD", "1000000000.01", "99999999999", "0x10", "١"} {
		if got, err := ParseUSD(in); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("ParseUSD(%q) = %d, %v; want errs.ErrInvalid", in, got, err)
		}
	}
}

func TestFormatUSD(t *testing.T) {
	for micros, want := range map[int64]string{0: "0.00", 5_000_000: "5.00", 5_500_000: "5.50", 1: "0.000001", 123_450: "0.12345", -2_000_000: "-2.00"} {
		if got := FormatUSD(micros); got != want {
			t.Errorf("FormatUSD(%d) = %q, want %q", micros, got, want)
		}
	}
}

// FuzzParseUSD: whatever the input, ParseUSD either refuses it with
// errs.ErrInvalid or returns an amount in [0, a billion dollars] that
// FormatUSD writes back into a string ParseUSD reads as the same amount.
func FuzzParseUSD(f *testing.F) {
	for _, s := range []string{"5", "5.00", "$0.05", ".5", "1000000000", "0.000001", "-1", "1e9", "5.", "", "9999999999.999999", "00012.3400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseUSD(s)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) {
				t.Fatalf("ParseUSD(%q): %v, not errs.ErrInvalid", s, err)
			}
			return
		}
		if m < 0 || m > maxCapMicros {
			t.Fatalf("ParseUSD(%q) = %d, out of range", s, m)
		}
		back, err := ParseUSD(FormatUSD(m))
		if err != nil || back != m {
			t.Fatalf("ParseUSD(FormatUSD(%d)) = %d, %v", m, back, err)
		}
	})
}
