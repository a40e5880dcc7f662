package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// kind says what a row's cells hold.
type kind int

const (
	secs kind = iota // wall time
	rate             // wall time and MB/s of the corpus's real data
	size             // bytes
	text             // free text
)

// row is one line of the result table: stead, restic, tar.
type row struct {
	op   string
	kind kind
	v    [3]*result // secs, rate
	n    [3]int64   // size
	has  [3]bool    // size: cell measured
	s    [3]string  // text
}

// table collects rows; real is the corpus's real data in bytes (for MB/s).
type table struct {
	real int64
	rows []row
	// third names the third column ("tar" when empty).
	third string
}

func (t *table) add(r ...row) { t.rows = append(t.rows, r...) }

func (t *table) cell(r row, i int) string {
	switch r.kind {
	case secs, rate:
		if r.v[i] == nil {
			return "—"
		}
		s := fmt.Sprintf("%.2f s", r.v[i].dur.Seconds())
		if r.kind == rate {
			s += fmt.Sprintf(", %.0f MB/s", float64(t.real)/1e6/r.v[i].dur.Seconds())
		}
		return s
	case size:
		if !r.has[i] {
			return "—"
		}
		return decimal(r.n[i])
	}
	if r.s[i] == "" {
		return "—"
	}
	return r.s[i]
}

// ratio is stead's number over restic's (time or bytes: below 1 means
// stead is faster or smaller).
func (t *table) ratio(r row) string {
	switch r.kind {
	case secs, rate:
		if r.v[0] == nil || r.v[1] == nil || r.v[1].dur == 0 {
			return ""
		}
		return fmt.Sprintf("%.2fx", r.v[0].dur.Seconds()/r.v[1].dur.Seconds())
	case size:
		if !r.has[0] || !r.has[1] || r.n[1] == 0 {
			return ""
		}
		return fmt.Sprintf("%.2fx", float64(r.n[0])/float64(r.n[1]))
	}
	return ""
}

// print writes the table as Markdown with padded columns, then CPU time
// and peak RSS of the full local backup and the local restore.
func (t *table) print(w io.Writer) {
	third := t.third
	if third == "" {
		third = "tar"
	}
	lines := [][]string{{"operation", "stead", "restic", third, "stead/restic"}}
	for _, r := range t.rows {
		lines = append(lines, []string{r.op, t.cell(r, 0), t.cell(r, 1), t.cell(r, 2), t.ratio(r)})
	}
	for _, r := range t.rows {
		if r.kind != rate || !strings.Contains(r.op, "→ local") && !strings.Contains(r.op, "from local") {
			continue
		}
		cpu, rss := []string{"  CPU (user+sys), " + r.op}, []string{"  peak RSS, " + r.op}
		for i := range 3 {
			if r.v[i] == nil {
				cpu, rss = append(cpu, "—"), append(rss, "—")
				continue
			}
			cpu = append(cpu, fmt.Sprintf("%.2f s", r.v[i].cpu.Seconds()))
			m := decimal(r.v[i].maxRSS)
			if r.v[i].maxRSS-r.v[i].floor < 2<<20 {
				m = "≤ " + m // not above the harness's own RSS: see resetPeak
			}
			rss = append(rss, m)
		}
		ratio := func(a, b float64) string {
			if r.v[0] == nil || r.v[1] == nil || b == 0 {
				return ""
			}
			return fmt.Sprintf("%.2fx", a/b)
		}
		if r.v[0] != nil && r.v[1] != nil {
			cpu = append(cpu, ratio(r.v[0].cpu.Seconds(), r.v[1].cpu.Seconds()))
			rss = append(rss, ratio(float64(r.v[0].maxRSS), float64(r.v[1].maxRSS)))
		} else {
			cpu, rss = append(cpu, ""), append(rss, "")
		}
		lines = append(lines, cpu, rss)
	}
	width := make([]int, 5)
	for _, l := range lines {
		for i, c := range l {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	pad := func(s string, n int, right bool) string {
		sp := strings.Repeat(" ", n-utf8.RuneCountInString(s))
		if right {
			return sp + s
		}
		return s + sp
	}
	for k, l := range lines {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range l {
			b.WriteString(" " + pad(c, width[i], i > 0) + " |")
		}
		fmt.Fprintln(w, b.String())
		if k == 0 {
			b.Reset()
			b.WriteString("|")
			for i := range l {
				if i == 0 {
					b.WriteString(strings.Repeat("-", width[i]+2) + "|")
				} else {
					b.WriteString(strings.Repeat("-", width[i]+1) + ":|")
				}
			}
			fmt.Fprintln(w, b.String())
		}
	}
}

// summarizeDiff condenses a treedigest.Diff into "identical" or the number
// of entries that differ and in which attributes, e.g. "12 entries differ:
// mtime 4, sparse layout 3, xattr 5". A regular file whose data layout or
// hash differs is "sparse layout" when sameContent says its bytes (holes
// read as zeros) are equal and "content" when they are not.
func summarizeDiff(diff []string, sameContent func(rel string) (bool, error)) (string, error) {
	if len(diff) == 0 {
		return "identical", nil
	}
	type side struct{ a, b map[string]string }
	entries := map[string]*side{}
	var order []string
	for _, l := range diff {
		if len(l) < 3 {
			continue
		}
		sign, line := l[:1], l[2:]
		key, rest, _ := strings.Cut(line, " type=")
		e := entries[key]
		if e == nil {
			e = &side{}
			entries[key] = e
			order = append(order, key)
		}
		fields := map[string]string{}
		for _, f := range strings.Fields("type=" + rest) {
			name, val, _ := strings.Cut(f, "=")
			fields[name] = val
		}
		if sign == "-" {
			e.a = fields
		} else {
			e.b = fields
		}
	}
	counts := map[string]int{}
	for _, k := range order {
		e := entries[k]
		switch {
		case e.b == nil:
			counts["missing"]++
			continue
		case e.a == nil:
			counts["extra"]++
			continue
		}
		seen := map[string]bool{}
		for _, m := range []map[string]string{e.a, e.b} {
			for name := range m {
				if e.a[name] == e.b[name] {
					continue
				}
				attr := name
				switch {
				case strings.HasPrefix(name, "xattr:"):
					attr = "xattr"
				case name == "data" || name == "sha256":
					rel, err := strconv.Unquote(k)
					if err != nil {
						return "", fmt.Errorf("summarize diff: entry %s: %w", k, err)
					}
					same, err := sameContent(rel)
					if err != nil {
						return "", err
					}
					attr = "content"
					if same {
						attr = "sparse layout"
					}
				}
				if !seen[attr] {
					seen[attr] = true
					counts[attr]++
				}
			}
		}
	}
	var parts []string
	for _, k := range sortedKeys(counts) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return fmt.Sprintf("%d entries differ: %s", len(order), strings.Join(parts, ", ")), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// decimal formats bytes in decimal units (as MB/s is).
func decimal(n int64) string {
	f := float64(n)
	switch {
	case n >= 1e9 || n <= -1e9:
		return fmt.Sprintf("%.2f GB", f/1e9)
	case n >= 1e6 || n <= -1e6:
		return fmt.Sprintf("%.1f MB", f/1e6)
	case n >= 1e3 || n <= -1e3:
		return fmt.Sprintf("%.1f kB", f/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// mb formats bytes as decimal megabytes.
func mb(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/1e6) }

// human formats bytes in binary units.
func human(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, exp := float64(n), 0
	for f >= unit*unit || f <= -unit*unit {
		f /= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", f/unit, "KMGTPE"[exp])
}
