package files

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"path"
	"strings"
	"testing"

	"github.com/stead-dev/stead/internal/testutil"
)

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/", "", "a", "/a/../b", "/..", "//x//y/", "/a/\x00", "/a/./b/../../..", "/\xff\xfe/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := CleanPath(in)
		if err != nil {
			if out != "" {
				t.Fatalf("error with result %q", out)
			}
			return
		}
		if in == "" || in[0] != '/' || strings.IndexByte(in, 0) >= 0 {
			t.Fatalf("CleanPath(%q) accepted a bad path", in)
		}
		if out[0] != '/' || path.Clean(out) != out || strings.IndexByte(out, 0) >= 0 {
			t.Fatalf("CleanPath(%q) = %q: not clean and absolute", in, out)
		}
		for _, c := range strings.Split(out, "/") {
			if c == ".." || c == "." {
				t.Fatalf("CleanPath(%q) = %q keeps %q", in, out, c)
			}
		}
		if again, err := CleanPath(out); err != nil || again != out {
			t.Fatalf("CleanPath not idempotent: %q -> %q -> %q, %v", in, out, again, err)
		}
		// What the kernel resolves lexically from the root equals the result.
		if path.Clean("/"+in) != out {
			t.Fatalf("CleanPath(%q) = %q; lexical resolution gives %q", in, out, path.Clean("/"+in))
		}
	})
}

func FuzzExtractTar(f *testing.F) {
	testutil.RequireRoot(f)
	seeds := [][]tarEntry{
		{{name: "a/b/c", body: "x"}},
		{{name: "../evil", body: "x"}},
		{{name: "/abs", body: "x"}},
		{{name: "s", typ: tar.TypeSymlink, link: "../../outside"}, {name: "s/canary", body: "x"}},
		{{name: "s", typ: tar.TypeSymlink, link: "/"}, {name: "s/x", body: "x"}},
		{{name: "s", typ: tar.TypeSymlink, link: "../../outside/canary"}, {name: "s", body: "x"}},
		{{name: "h", typ: tar.TypeLink, link: "../outside/canary"}},
		{{name: "d/", typ: tar.TypeDir, mode: 0o4777}, {name: "d/f", typ: tar.TypeFifo}},
		{{name: "x", body: "y", pax: map[string]string{"SCHILY.xattr.user.a": "b", "SCHILY.xattr.security.capability": "zz"}}},
		{{name: "n", typ: tar.TypeChar}, {name: "b", typ: tar.TypeBlock}},
	}
	for _, s := range seeds {
		b, err := io.ReadAll(tarOf(f, s...))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, trusted bool) {
		e := newEnv(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		opts := ExtractOptions{PreserveOwner: trusted, UID: 1000, GID: 1000, Progress: func(n int64) {
			if n > 64<<20 {
				cancel() // sparse headers may claim huge sizes
			}
		}}
		_ = e.r.ExtractTar(ctx, "/w/d", bytes.NewReader(data), opts)
		e.checkOutside(t)
	})
}
