package client

import (
	"strings"
	"testing"
)

func TestParseVolumeMount(t *testing.T) {
	ok := []struct {
		in   string
		want VolumeMount
	}{
		{"shared:/data", VolumeMount{Volume: "shared", Path: "/data"}},
		{"shared:/data:ro", VolumeMount{Volume: "shared", Path: "/data", ReadOnly: true}},
		{"shared:/data:rw", VolumeMount{Volume: "shared", Path: "/data"}},
		{"shared/agents/a1:/data", VolumeMount{Volume: "shared", SubPath: "agents/a1", Path: "/data"}},
		{"shared/agents/a1:/data:ro", VolumeMount{Volume: "shared", SubPath: "agents/a1", Path: "/data", ReadOnly: true}},
		{"vol-0123abcd:/home/agent/cache", VolumeMount{Volume: "vol-0123abcd", Path: "/home/agent/cache"}},
		{"v/.hidden/x..y:/mnt/a b", VolumeMount{Volume: "v", SubPath: ".hidden/x..y", Path: "/mnt/a b"}},
		{"shared/agents/a1/:/data/:ro", VolumeMount{Volume: "shared", SubPath: "agents/a1", Path: "/data", ReadOnly: true}},
	}
	for _, tc := range ok {
		got, err := ParseVolumeMount(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.in, got, tc.want)
		}
	}

	bad := []struct {
		in, msg string
	}{
		{"", "no mount path"},
		{"shared", "no mount path"},
		{"shared/data", "no mount path"},
		{":/data", "empty volume name"},
		{"/sub:/data", "empty volume name"},
		{"shared:", "empty mount path"},
		{"shared::ro", "empty mount path"},
		{"shared:data", "not absolute"},
		{"shared:data:ro", "not absolute"},
		{"shared:/", "cannot mount over /"},
		{"shared:/data:rx", `unknown option "rx"`},
		{"shared:/data:ro:ro", "may not contain ':'"},
		{"shared:/a:b", `unknown option "b"`},
		{"shared:/data/../etc", `may not contain ".."`},
		{"shared:/data/./x", `may not contain "."`},
		{"shared:/data//x", "empty component"},
		{"shared:/data//", "empty component"},
		{"shared:/:ro", "cannot mount over /"},
		{"shared/:/data", "empty sub-path"},
		{"shared/..:/data", `may not contain ".."`},
		{"shared/agents/../../etc:/data", `may not contain ".."`},
		{"shared/./a:/data", `may not contain "."`},
		{"shared//etc:/data", "empty component"},
		{"shared/a//:/data", "empty component"},
		{"shared/a\x00b:/data", "control character"},
		{"sha\nred:/data", "control character"},
		{"shared:/da\tta", "control character"},
		{"shared/\xff:/data", "not valid UTF-8"},
	}
	for _, tc := range bad {
		m, err := ParseVolumeMount(tc.in)
		if err == nil {
			t.Errorf("%q: accepted as %+v", tc.in, m)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "NAME[/SUB/PATH]:/mount/path[:ro]") {
			t.Errorf("%q: error %q, want it to say %q and show the syntax", tc.in, err, tc.msg)
		}
	}
}

func FuzzParseVolumeMount(f *testing.F) {
	for _, s := range []string{
		"shared:/data", "shared/agents/a1:/data:ro", "x:/y:rw", "a/b/c:/d/e/f",
		"shared:/data/../etc", "shared/..:/x", ":/x", "a:b", "a::ro", "a:/b:ro:ro", "a/:/b", "a:/", "a/b/:/c/", "a/b//:/c//",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseVolumeMount(s)
		if err != nil {
			return
		}
		if m.Volume == "" || strings.ContainsAny(m.Volume, "/:") {
			t.Fatalf("%q: bad volume %q", s, m.Volume)
		}
		if !strings.HasPrefix(m.Path, "/") || m.Path == "/" || strings.Contains(m.Path, ":") {
			t.Fatalf("%q: bad mount path %q", s, m.Path)
		}
		for _, p := range []string{m.SubPath, strings.TrimPrefix(m.Path, "/")} {
			if p == "" {
				continue
			}
			if strings.HasPrefix(p, "/") {
				t.Fatalf("%q: absolute component path %q", s, p)
			}
			for _, c := range strings.Split(p, "/") {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("%q: component %q in %q", s, c, p)
				}
			}
		}
		again, err := ParseVolumeMount(FormatVolumeMount(m))
		if err != nil {
			t.Fatalf("%q: formatted as %q, which does not parse: %v", s, FormatVolumeMount(m), err)
		}
		if again != m {
			t.Fatalf("%q: round trip %+v -> %q -> %+v", s, m, FormatVolumeMount(m), again)
		}
	})
}
