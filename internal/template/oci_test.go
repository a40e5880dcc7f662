package template

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"

	"github.com/stead-dev/stead/internal/template/testimage"
	"github.com/stead-dev/stead/internal/testutil"
)

func TestImportOCIFromLayoutAndDockerArchives(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	layoutPath, dockerTar := testimage.Build(t, dir)
	rawTar := testimage.BuildRawDockerArchive(t, dir)
	img := testimage.Image(t)
	manifestDigest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, source, digest string
	}{
		{"layout", SourceOCILayout + layoutPath, manifestDigest.String()},
		{"layout tag", SourceOCILayout + layoutPath + ":" + testimage.Tag, manifestDigest.String()},
		{"layout digest", SourceOCILayout + layoutPath + ":" + manifestDigest.String(), manifestDigest.String()},
		{"docker archive", SourceDockerArchive + dockerTar, configDigest.String()},
		{"docker archive tag", SourceDockerArchive + dockerTar + ":" + testimage.Ref, configDigest.String()},
		{"raw docker archive", SourceDockerArchive + rawTar, configDigest.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "root")
			var calls [][2]int64
			start := time.Now()
			info, err := ImportOCI(context.Background(), tc.source, dst, func(done, total int64) {
				calls = append(calls, [2]int64{done, total})
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("ImportOCI took %v", time.Since(start))

			if info.Digest != tc.digest {
				t.Errorf("digest %s, want %s", info.Digest, tc.digest)
			}
			cfg := testimage.Config()
			if !slices.Equal(info.Env, cfg.Env) || info.WorkingDir != cfg.WorkingDir || info.User != cfg.User ||
				!slices.Equal(info.Entrypoint, cfg.Entrypoint) || !slices.Equal(info.Cmd, cfg.Cmd) {
				t.Errorf("info %+v does not match config %+v", info, cfg)
			}
			bb, _ := os.Stat(testimage.BusyboxPath)
			if info.Size < bb.Size() || info.Size > bb.Size()+4096 {
				t.Errorf("size %d, want busybox (%d) plus a few small files", info.Size, bb.Size())
			}

			if len(calls) < 2 {
				t.Fatalf("progress called %d times, want several", len(calls))
			}
			last := calls[len(calls)-1]
			if last[0] != last[1] || last[1] <= 0 {
				t.Errorf("last progress %v, want done == total > 0", last)
			}
			for i := 1; i < len(calls); i++ {
				if calls[i][0] < calls[i-1][0] {
					t.Errorf("progress went back: %v after %v", calls[i], calls[i-1])
				}
			}
			if strings.HasPrefix(tc.name, "raw") && last[1] < bb.Size() {
				t.Errorf("raw archive total %d below the busybox size %d", last[1], bb.Size())
			}

			checkImported(t, dst)
		})
	}
}

// checkImported checks the flattened test image and the sandbox conventions
// in dst, and runs busybox in it.
func checkImported(t *testing.T, dst string) {
	t.Helper()
	for _, gone := range []string{testimage.RemovedFile, testimage.OpaqueLowerFile, "etc/.wh.removeme", testimage.OpaqueDir + "/.wh..wh..opq"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: want absent, got %v", gone, err)
		}
	}
	wantFile(t, dst, testimage.Layer2File, testimage.Layer2Content)
	if _, err := os.Stat(filepath.Join(dst, testimage.OpaqueUpperFile)); err != nil {
		t.Errorf("opaque dir lost its upper file: %v", err)
	}
	for a, b := range map[string]string{testimage.Motd: testimage.MotdLink, "bin/busybox": testimage.CrossLink} {
		fa, errA := os.Lstat(filepath.Join(dst, a))
		fb, errB := os.Lstat(filepath.Join(dst, b))
		if errA != nil || errB != nil || !os.SameFile(fa, fb) {
			t.Errorf("%s and %s are not one inode (%v, %v)", a, b, errA, errB)
		}
	}
	if got, err := os.Readlink(filepath.Join(dst, testimage.EnvLink)); err != nil || got != testimage.EnvLinkTarget {
		t.Errorf("%s -> %q (%v)", testimage.EnvLink, got, err)
	}
	if got, err := os.Readlink(filepath.Join(dst, "bin/sh")); err != nil || got != "busybox" {
		t.Errorf("bin/sh -> %q (%v)", got, err)
	}
	buf := make([]byte, 64)
	if n, err := unix.Lgetxattr(filepath.Join(dst, testimage.XattrFile), testimage.XattrName, buf); err != nil ||
		string(buf[:n]) != testimage.XattrValue {
		t.Errorf("xattr %s of %s = %q (%v)", testimage.XattrName, testimage.XattrFile, buf[:max(n, 0)], err)
	}
	wantMode(t, dst, testimage.OwnedFile, 0o640, testimage.OwnedUID, testimage.OwnedGID)

	for _, d := range []struct {
		path     string
		mode     os.FileMode
		uid, gid int
	}{
		{"workspace", 0o755, 1000, 1000}, {"data", 0o755, 1000, 1000}, {"home/agent", 0o755, 1000, 1000},
		{"tmp", os.ModeSticky | 0o777, 0, 0}, {"var/log", 0o755, 0, 0}, {".stead", 0o755, 0, 0},
		{"proc", 0o555, 0, 0}, {"sys", 0o555, 0, 0}, {"dev", 0o755, 0, 0}, {"run", 0o755, 0, 0},
	} {
		wantMode(t, dst, d.path, d.mode|os.ModeDir, d.uid, d.gid)
	}
	// The image's passwd had no final newline and no agent; it had no group.
	wantFile(t, dst, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"+
		"agent:x:1000:1000:agent:/home/agent:/bin/sh\n")
	wantFile(t, dst, "etc/group", minimalGroup)

	out, err := chrootCmd(dst, 0, "/bin/sh", "-c", "echo hi && id agent && ls /opt/old").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hi\n") ||
		!strings.Contains(string(out), "uid=1000(agent) gid=1000(agent)") || strings.Contains(string(out), "lower") {
		t.Errorf("busybox under chroot: %v\n%s", err, out)
	}
	out, err = chrootCmd(dst, 1000, "/bin/sh", "-c", "whoami && touch /workspace/x /home/agent/y /tmp/z && echo done").CombinedOutput()
	if err != nil || string(out) != "agent\ndone\n" {
		t.Errorf("busybox as agent under chroot: %v\n%s", err, out)
	}
}

// chrootCmd prepares a command chrooted into root, run as uid:uid.
func chrootCmd(root string, uid int, argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/bin:/usr/bin", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	return cmd
}

func TestImportOCIRejectsBadSources(t *testing.T) {
	dir := t.TempDir()
	layoutPath, dockerTar := testimage.Build(t, dir)
	for _, tc := range []struct {
		name, source, want string
	}{
		{"missing layout", SourceOCILayout + "/nonexistent/layout", "no such file"},
		{"layout without the tag", SourceOCILayout + layoutPath + ":nosuchtag", `no image "nosuchtag" (tags: latest)`},
		{"layout is a file", SourceOCILayout + dockerTar, "wrong file type"},
		{"not a layout", SourceOCILayout + dir, "open OCI layout"},
		{"missing archive", SourceDockerArchive + "/nonexistent/image.tar", "no such file"},
		{"archive is a directory", SourceDockerArchive + layoutPath, "wrong file type"},
		{"archive without the tag", SourceDockerArchive + dockerTar + ":other.test/image:v1", "open docker archive"},
		{"bad reference", "Not A Reference!", "parse image reference"},
		{"unreachable registry", "127.0.0.1:1/nothing:latest", "fetch image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, exists := range []bool{true, false} {
				dst := filepath.Join(t.TempDir(), "root")
				if exists {
					if err := os.Mkdir(dst, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				_, err := ImportOCI(context.Background(), tc.source, dst, nil)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one containing %q", err, tc.want)
				}
				entries, statErr := os.ReadDir(dst)
				if exists && (statErr != nil || len(entries) != 0) {
					t.Errorf("destination touched: %d entries, %v", len(entries), statErr)
				}
				if !exists && !errors.Is(statErr, os.ErrNotExist) {
					t.Errorf("destination created: %v", statErr)
				}
			}
		})
	}
}

func TestImportOCIRefusesNonEmptyDestination(t *testing.T) {
	testutil.RequireRoot(t)
	layoutPath, _ := testimage.Build(t, t.TempDir())
	dst := t.TempDir()
	if err := os.WriteFile(filepath.Join(dst, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ImportOCI(context.Background(), SourceOCILayout+layoutPath, dst, nil); err == nil ||
		!strings.Contains(err.Error(), "not empty") {
		t.Fatalf("err = %v, want a not-empty error", err)
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 1 {
		t.Errorf("destination changed: %d entries", len(entries))
	}
}

func TestImportOCIRemovesPartialTemplateOnFailure(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	good := testimage.Layer(t,
		testimage.Member{Header: &tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755}},
		testimage.Member{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "etc/fine", Mode: 0o644}, Body: []byte("fine\n")},
	)
	bad := testimage.Layer(t,
		testimage.Member{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "early", Mode: 0o644}, Body: []byte("x")},
		testimage.Member{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "../escape", Mode: 0o644}, Body: []byte("x")},
	)
	img, err := mutate.AppendLayers(empty.Image, good, bad)
	if err != nil {
		t.Fatal(err)
	}
	layoutPath := filepath.Join(dir, "layout")
	testimage.WriteLayout(t, layoutPath, img)

	for _, exists := range []bool{true, false} {
		dst := filepath.Join(t.TempDir(), "root")
		if exists {
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_, err = ImportOCI(context.Background(), SourceOCILayout+layoutPath, dst, nil)
		if err == nil || !strings.Contains(err.Error(), "unsafe tar path") {
			t.Fatalf("err = %v, want an unsafe path error", err)
		}
		entries, statErr := os.ReadDir(dst)
		if exists && (statErr != nil || len(entries) != 0) {
			t.Errorf("destination not emptied: %d entries, %v", len(entries), statErr)
		}
		if !exists && !errors.Is(statErr, os.ErrNotExist) {
			t.Errorf("destination not removed: %v", statErr)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(dst), "escape")); err == nil {
			t.Errorf("an entry escaped the destination")
		}
	}
}

func TestImportOCIKeepsConventionsInsideTheRoot(t *testing.T) {
	testutil.RequireRoot(t)
	outside := t.TempDir() // stands for a host directory the image aims at
	hostFile := filepath.Join(outside, "passwd")
	if err := os.WriteFile(hostFile, []byte("host:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		member testimage.Member
	}{
		{"home symlink", testimage.Member{Header: &tar.Header{Typeflag: tar.TypeSymlink, Name: "home", Linkname: outside}}},
		{"passwd symlink", testimage.Member{Header: &tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/passwd", Linkname: hostFile}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layer := testimage.Layer(t,
				testimage.Member{Header: &tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755}},
				tc.member)
			img, err := mutate.AppendLayers(empty.Image, layer)
			if err != nil {
				t.Fatal(err)
			}
			layoutPath := filepath.Join(t.TempDir(), "layout")
			testimage.WriteLayout(t, layoutPath, img)
			dst := filepath.Join(t.TempDir(), "root")
			_, err = ImportOCI(context.Background(), SourceOCILayout+layoutPath, dst, nil)
			if err == nil || !strings.Contains(err.Error(), "escapes") {
				t.Errorf("err = %v, want a path-escape error", err)
			}
			if _, err := os.Lstat(filepath.Join(outside, "agent")); err == nil {
				t.Errorf("conventions created a directory outside the root")
			}
			wantFile(t, outside, "passwd", "host:x:0:0::/:/bin/sh\n")
		})
	}
}

func TestRelayLinksLastDefersHardlinksToLaterTargets(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeLink, Name: "/upper/link", Linkname: "lower/file"},
		{Typeflag: tar.TypeLink, Name: "upper/link2", Linkname: "upper/link"},
		{Typeflag: tar.TypeLink, Name: "orphan", Linkname: "deleted/by/whiteout"},
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "./lower/file", Mode: 0o644, Size: 5},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("hello"))
		}
	}
	tw.Close()

	var out bytes.Buffer
	size, err := relayLinksLast(context.Background(), &in, &out)
	if err != nil {
		t.Fatal(err)
	}
	if size != 5 {
		t.Errorf("size %d, want 5", size)
	}
	var got []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name+">"+h.Linkname)
	}
	want := []string{".>", "lower/file>", "upper/link>lower/file", "upper/link2>upper/link"}
	if !slices.Equal(got, want) {
		t.Errorf("relayed %q, want %q", got, want)
	}
}

func TestEnsureAgentAccountKeepsAnExistingAgent(t *testing.T) {
	dst := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dst, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0::/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/zsh\n"
	group := "root:x:0:\nubuntu:x:1000:\n"
	shadow := "root:*:1::::::\n"
	for n, s := range map[string]string{"passwd": passwd, "group": group, "shadow": shadow} {
		if err := os.WriteFile(filepath.Join(dst, "etc", n), []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	r, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := ensureAgentAccount(r); err != nil {
		t.Fatal(err)
	}
	wantFile(t, dst, "etc/passwd", passwd)
	wantFile(t, dst, "etc/group", group+agentGroupLine)
	wantFile(t, dst, "etc/shadow", shadow+agentShadowLine)
	if fi, err := os.Stat(filepath.Join(dst, "etc/group")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("etc/group mode changed: %v %v", fi.Mode(), err)
	}
}

func TestImportOCIDetectsCorruptLayer(t *testing.T) {
	testutil.RequireRoot(t)
	layoutPath, _ := testimage.Build(t, t.TempDir())
	layers, err := testimage.Image(t).Layers()
	if err != nil {
		t.Fatal(err)
	}
	// Replace the top layer's blob by another valid gzipped tar.
	d, err := layers[1].Digest()
	if err != nil {
		t.Fatal(err)
	}
	other := testimage.Layer(t, testimage.Member{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "evil", Mode: 0o644}, Body: []byte("evil\n")})
	rc, err := other.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layoutPath, "blobs", d.Algorithm, d.Hex), data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "root")
	_, err = ImportOCI(context.Background(), SourceOCILayout+layoutPath, dst, nil)
	if err == nil || !strings.Contains(err.Error(), "does not match its diff id") {
		t.Fatalf("err = %v, want a diff id mismatch", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("destination left behind: %v", err)
	}
}

func TestImportOCIStopsOnCancelledContext(t *testing.T) {
	testutil.RequireRoot(t)
	layoutPath, _ := testimage.Build(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dst := filepath.Join(t.TempDir(), "root")
	if _, err := ImportOCI(ctx, SourceOCILayout+layoutPath, dst, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("destination left behind: %v", err)
	}
}
