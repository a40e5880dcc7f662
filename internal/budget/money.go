package budget

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/stead-dev/stead/internal/errs"
)

// microsPerDollar is the unit budgets count in: a micro-dollar.
const microsPerDollar = 1_000_000

// maxCapMicros bounds a cap (a billion dollars) so that every sum and
// product of micro-dollars stays far inside int64.
const maxCapMicros = 1_000_000_000 * microsPerDollar

// ParseUSD reads an amount of US dollars written as a plain decimal
// ("5", "5.00", "0.000125", an optional leading "$") into micro-dollars.
// It refuses signs, exponents, more than 6 decimals, empty parts and
// amounts above a billion dollars with errs.ErrInvalid; it never rounds.
func ParseUSD(s string) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("amount %q: %s; want US dollars as a decimal such as 5.00: %w", s, why, errs.ErrInvalid)
	}
	v := strings.TrimPrefix(strings.TrimSpace(s), "$")
	if v == "" {
		return bad("empty")
	}
	whole, frac, hasDot := strings.Cut(v, ".")
	if whole == "" && frac == "" || hasDot && frac == "" {
		return bad("no digits after the point")
	}
	for _, part := range []string{whole, frac} {
		for _, r := range part {
			if r < '0' || r > '9' {
				return bad("only digits and one decimal point")
			}
		}
	}
	if len(frac) > 6 {
		return bad("more than 6 decimals (a micro-dollar is the smallest unit)")
	}
	if len(whole) > 10 {
		return bad("more than a billion dollars")
	}
	w := int64(0)
	if whole != "" {
		n, err := strconv.ParseInt(whole, 10, 64)
		if err != nil {
			return bad("not a number")
		}
		w = n
	}
	f := int64(0)
	if frac != "" {
		n, err := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		if err != nil {
			return bad("not a number")
		}
		f = n
	}
	m := w*microsPerDollar + f
	if m > maxCapMicros {
		return bad("more than a billion dollars")
	}
	return m, nil
}

// FormatUSD writes micro-dollars as a decimal with at least 2 and at most
// 6 decimals ("5.00", "0.000125"); ParseUSD reads it back exactly.
func FormatUSD(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	s := fmt.Sprintf("%s%d.%06d", sign, micros/microsPerDollar, micros%microsPerDollar)
	for strings.HasSuffix(s, "0") && len(s)-strings.IndexByte(s, '.') > 3 {
		s = s[:len(s)-1]
	}
	return s
}

// dollarsToMicros converts a priced cost (a float of dollars, as the
// meter reports it) to micro-dollars, to the nearest.
func dollarsToMicros(d float64) int64 {
	if d <= 0 || math.IsNaN(d) {
		return 0
	}
	if d >= float64(math.MaxInt64/2)/microsPerDollar {
		return math.MaxInt64 / 2
	}
	return int64(math.Round(d * microsPerDollar))
}
