package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stead-dev/stead/client"
)

// A TypeScript client generated from the daemon's served /openapi.json
// with openapi-typescript and driven through openapi-fetch, as the
// ecosystem's users do: no hand-written types, no fixes to the generated
// ones. The npm packages are installed once per test binary into a
// directory of the system's temp dir (kept, so a rerun needs no download).

// Pinned versions of the generator, the fetch client, the compiler and
// node's types.
const (
	openapiTSVersion    = "7.13.0"
	openapiFetchVersion = "0.17.0"
	typescriptVersion   = "5.9.3"
	typesNodeVersion    = "20.19.25"
)

var (
	openapiTSOnce sync.Once
	openapiTSDir  string
	openapiTSErr  error
)

// openapiTSTools installs the packages (once) and returns the directory
// whose node_modules holds them.
func openapiTSTools(t *testing.T) string {
	t.Helper()
	openapiTSOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("stead-e2e-openapi-ts-%s-%s-%s-%s",
			openapiTSVersion, openapiFetchVersion, typescriptVersion, typesNodeVersion))
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@types", "node", "package.json")); err != nil {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				openapiTSErr = err
				return
			}
			if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"stead-e2e-openapi-ts","private":true,"type":"module"}`), 0o644); err != nil {
				openapiTSErr = err
				return
			}
			cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
				"openapi-typescript@"+openapiTSVersion, "openapi-fetch@"+openapiFetchVersion,
				"typescript@"+typescriptVersion, "@types/node@"+typesNodeVersion)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				openapiTSErr = fmt.Errorf("npm install: %v\n%s", err, out)
				return
			}
		}
		openapiTSDir = dir
	})
	if openapiTSErr != nil {
		t.Fatal(openapiTSErr)
	}
	return openapiTSDir
}

// runIn runs a command in dir and returns its combined output; it fails
// the test when the command fails.
func runIn(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func TestGeneratedTypeScriptClientWorksWithoutHandFixes(t *testing.T) {
	d := newDaemon(t)
	tools := openapiTSTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	work := t.TempDir()
	if err := os.Symlink(filepath.Join(tools, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "package.json"), []byte(`{"private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "openapi_client.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "main.ts"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	nm := filepath.Join(tools, "node_modules")
	// Redocly (inside openapi-typescript) would send telemetry.
	noTelemetry := []string{"REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true"}

	// Generate the types from the document the daemon serves.
	runIn(t, ctx, work, noTelemetry, "node", filepath.Join(nm, "openapi-typescript", "bin", "cli.js"),
		"http://"+d.addr+"/openapi.json", "-o", "schema.d.ts")
	schema, err := os.ReadFile(filepath.Join(work, "schema.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	// The server never sends null for an array, and the document says so.
	if n := strings.Count(string(schema), "[] | null"); n > 0 {
		t.Errorf("the generated types declare %d arrays as nullable", n)
	}

	tsc := filepath.Join(nm, "typescript", "bin", "tsc")
	opts := []string{"--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", "--types", "node"}
	runIn(t, ctx, work, nil, "node", append(append([]string{tsc, "--noEmit"}, opts...), "main.ts")...)
	runIn(t, ctx, work, nil, "node", append(append([]string{tsc, "--outDir", "out"}, opts...), "main.ts")...)

	out := runIn(t, ctx, work, []string{"STEAD_URL=http://" + d.addr, "STEAD_API_KEY=" + d.key, "STEAD_PREFIX=ts"},
		"node", filepath.Join("out", "main.js"))
	if lines := strings.Split(strings.TrimSpace(out), "\n"); lines[len(lines)-1] != "ok" {
		t.Fatalf("the TypeScript client did not finish:\n%s", out)
	}
}

// oapiCodegenVersion pins the Go generator.
const oapiCodegenVersion = "v2.8.2"

func TestGeneratedGoClientCompilesAndPages(t *testing.T) {
	d := newDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, n := range []string{"go-a", "go-b", "go-c"} {
		if _, err := d.c.CreateSandbox(ctx, client.CreateSandboxRequest{Name: n, NoStart: true}); err != nil {
			t.Fatal(err)
		}
	}
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "steadapi"), 0o755); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + d.addr + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("openapi.json: %d %v", resp.StatusCode, err)
	}
	main, err := os.ReadFile(filepath.Join("testdata", "oapigo", "main.go.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"spec.json": spec,
		"main.go":   main,
		"cfg.yaml":  []byte("package: steadapi\ngenerate:\n  models: true\n  client: true\noutput: steadapi/api.gen.go\n"),
		"go.mod":    []byte("module example.com/oapigo\n\ngo 1.24\n"),
	} {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goEnv := []string{"GOFLAGS=-mod=mod"}
	runIn(t, ctx, work, goEnv, "go", "run", "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@"+oapiCodegenVersion, "-config", "cfg.yaml", "spec.json")
	runIn(t, ctx, work, goEnv, "go", "mod", "tidy")
	runIn(t, ctx, work, goEnv, "go", "vet", "./...")
	out := runIn(t, ctx, work, append(goEnv, "STEAD_URL=http://"+d.addr, "STEAD_API_KEY="+d.key, "WANT_SANDBOXES=3"), "go", "run", ".")
	if strings.TrimSpace(out) != "ok" {
		t.Fatalf("the generated Go client: %s", out)
	}
}
