package main

import (
	"strings"
	"testing"
	"time"
)

func TestSummarizeDiffNamesTheAttributesThatDiffer(t *testing.T) {
	same := func(rel string) (bool, error) { return rel == "/sparse.img", nil }
	for _, tc := range []struct {
		name string
		diff []string
		want string
	}{
		{"equal trees", nil, "identical"},
		{"sparse file inflated", []string{
			`- "/sparse.img" type=file mode=0644 uid=0 gid=0 size=10 mtime=1 data=0-4 sha256=aa`,
			`+ "/sparse.img" type=file mode=0644 uid=0 gid=0 size=10 mtime=1 data=0-10 sha256=bb`,
		}, "1 entries differ: sparse layout 1"},
		{"content, xattr and a missing entry", []string{
			`- "/a" type=file mode=0644 uid=0 gid=0 size=10 mtime=1 data=0-10 sha256=aa xattr:"user.x"=01`,
			`+ "/a" type=file mode=0644 uid=0 gid=0 size=10 mtime=2 data=0-10 sha256=bb`,
			`- "/b" type=symlink mode=0777 uid=0 gid=0 size=1 mtime=1 target="a"`,
		}, "2 entries differ: content 1, missing 1, mtime 1, xattr 1"},
		{"root mode", []string{
			`- "/" type=dir mode=0755 uid=0 gid=0 mtime=1`,
			`+ "/" type=dir mode=0700 uid=0 gid=0 mtime=1`,
		}, "1 entries differ: mode 1"},
	} {
		got, err := summarizeDiff(tc.diff, same)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestTablePrintsRatioOfSteadToRestic(t *testing.T) {
	tb := &table{real: 1000e6}
	tb.add(row{op: "full backup → local", kind: rate, v: [3]*result{{dur: 10 * time.Second}, {dur: 20 * time.Second}, nil}},
		row{op: "repository size, local", kind: size, n: [3]int64{1.5e9, 1e9, 2e9}, has: [3]bool{true, true, true}})
	var b strings.Builder
	tb.print(&b)
	out := b.String()
	for _, want := range []string{"10.00 s, 100 MB/s", "20.00 s, 50 MB/s", "0.50x", "1.50 GB", "2.00 GB", "1.50x", "—"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
