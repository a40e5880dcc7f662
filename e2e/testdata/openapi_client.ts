// A client of the stead API generated from the daemon's /openapi.json by
// openapi-typescript, driven through openapi-fetch, with no hand-written
// types: e2e/openapi_ts_test.go generates ./schema.d.ts, type-checks this
// file with tsc --strict and runs it. Every check that fails throws; the
// last line printed is "ok".
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type Problem = components["schemas"]["ErrorModel"];
type Sandbox = components["schemas"]["Sandbox"];

const baseUrl = process.env.STEAD_URL ?? "";
const key = process.env.STEAD_API_KEY ?? "";
const prefix = process.env.STEAD_PREFIX ?? "ts";

function check(cond: boolean, what: string): asserts cond {
  if (!cond) throw new Error("check failed: " + what);
}

// The second type parameter picks the JSON media types (application/json
// and application/problem+json) of routes that also offer a stream, as
// openapi-fetch documents; exec's text/event-stream is for SSE clients.
const api = createClient<paths, `application/${string}json`>({ baseUrl, headers: { Authorization: `Bearer ${key}` } });

// Create three sandboxes (the first one is used for exec and files).
const created: Sandbox[] = [];
for (const n of ["a", "b", "c"]) {
  const { data, error } = await api.POST("/v1/sandboxes", { body: { name: `${prefix}-${n}` } });
  if (error) throw new Error(`create: ${error.status} ${error.detail}`);
  created.push(data);
}
const sb = created[0];
check(sb.state === "running", `sandbox state ${sb.state}`);

// Run a command and read its output as text.
{
  const { data, error } = await api.POST("/v1/sandboxes/{id}/exec", {
    params: { path: { id: sb.id } },
    body: { command: ["sh", "-c", "printf 'h\\303\\251llo w\\303\\266rld\\n'; printf oops >&2; exit 3"] },
  });
  if (error) throw new Error(`exec: ${error.status} ${error.detail}`);
  const stdout: string = data.stdout;
  check(stdout === "héllo wörld\n", `stdout ${JSON.stringify(stdout)}`);
  check(data.stderr === "oops", `stderr ${JSON.stringify(data.stderr)}`);
  check(data.exit_code === 3, `exit code ${data.exit_code}`);
  check(data.stdout_base64 === undefined, "text output has no base64 copy");
}
// Output that is not UTF-8 comes with its exact bytes in base64.
{
  const { data, error } = await api.POST("/v1/sandboxes/{id}/exec", {
    params: { path: { id: sb.id } },
    body: { command: ["printf", "a\\377b"] },
  });
  if (error) throw new Error(`exec binary: ${error.status} ${error.detail}`);
  check(data.stdout === "a\uFFFDb", `binary stdout text ${JSON.stringify(data.stdout)}`);
  const raw = Buffer.from(data.stdout_base64 ?? "", "base64");
  check(raw.equals(Buffer.from([0x61, 0xff, 0x62])), `binary stdout bytes ${raw.toString("hex")}`);
}

// Upload every byte value and download it back, byte-exact.
{
  const bytes = new Uint8Array(256 * 4);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7) % 256;
  const put = await api.PUT("/v1/sandboxes/{id}/files/content", {
    params: { path: { id: sb.id }, query: { path: "/tmp/blob.bin" } },
    body: bytes,
    bodySerializer: (b) => b,
    headers: { "Content-Type": "application/octet-stream" },
  });
  if (put.error) throw new Error(`upload: ${put.error.status} ${put.error.detail}`);
  check(put.data.size === bytes.length, `uploaded size ${put.data.size}`);
  const got = await api.GET("/v1/sandboxes/{id}/files/content", {
    params: { path: { id: sb.id }, query: { path: "/tmp/blob.bin" } },
    parseAs: "arrayBuffer",
  });
  if (got.error) throw new Error(`download: ${got.error.status} ${got.error.detail}`);
  const back = new Uint8Array(got.data);
  check(Buffer.from(back).equals(Buffer.from(bytes)), `downloaded ${back.length} bytes differ`);
}

// List with paging: two per page until more is false.
{
  const seen: string[] = [];
  const page = (after?: string) => api.GET("/v1/sandboxes", { params: { query: { limit: 2, after } } });
  let after: string | undefined;
  let pages = 0;
  for (;;) {
    const { data, error } = await page(after);
    if (error) throw new Error(`list: ${error.status} ${error.detail}`);
    pages++;
    check(data.items.length <= 2, `page of ${data.items.length}`);
    for (const s of data.items) seen.push(s.name);
    if (!data.more) break;
    check(typeof data.next === "string" && data.next !== "", "a page with more has a next cursor");
    after = data.next;
  }
  for (const s of created) check(seen.includes(s.name), `${s.name} listed (${seen.join(",")})`);
  check(pages >= 2, `paged in ${pages} pages`);
}

// A typed error: problem+json fields, typed by the generated ErrorModel.
{
  const { data, error, response } = await api.GET("/v1/sandboxes/{id}", { params: { path: { id: "no-such-sandbox" } } });
  check(data === undefined, "no data for a 404");
  check(error !== undefined, "an error for a 404");
  const p: Problem = error;
  check(p.status === 404 && response.status === 404, `status ${p.status}`);
  check(typeof p.detail === "string" && p.detail.length > 0, "a detail");
  check((response.headers.get("Content-Type") ?? "").startsWith("application/problem+json"), "problem+json");
}

for (const s of created) {
  const { error } = await api.DELETE("/v1/sandboxes/{id}", { params: { path: { id: s.id }, query: { purge: true } } });
  if (error) throw new Error(`delete: ${error.status} ${error.detail}`);
}
console.log("ok");
