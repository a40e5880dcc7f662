package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stead-dev/stead/client"
)

// allDocuments returns the OpenAPI document of every fake server of the
// route walk (together they register every route).
func allDocuments(t *testing.T) []map[string]any {
	t.Helper()
	servers, _ := authzServers(t)
	var docs []map[string]any
	for _, rs := range servers {
		c, err := client.New(rs.srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := c.OpenAPI(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
	return docs
}

// operations yields every operation of doc as "METHOD path" and its object.
func operations(doc map[string]any, f func(name string, op map[string]any)) {
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if o, ok := op.(map[string]any); ok {
				f(strings.ToUpper(method)+" "+path, o)
			}
		}
	}
}

// walkSchema calls f on every schema below s (s included), with where it is.
func walkSchema(where string, s any, f func(where string, s map[string]any)) {
	m, ok := s.(map[string]any)
	if !ok {
		return
	}
	f(where, m)
	if props, ok := m["properties"].(map[string]any); ok {
		for name, p := range props {
			walkSchema(where+"."+name, p, f)
		}
	}
	walkSchema(where+"[]", m["items"], f)
	walkSchema(where+"{}", m["additionalProperties"], f)
}

func TestOpenAPIDocumentDescribesEveryOperationAndProperty(t *testing.T) {
	missing := map[string]bool{}
	for _, doc := range allDocuments(t) {
		operations(doc, func(name string, op map[string]any) {
			if d, _ := op["description"].(string); strings.TrimSpace(d) == "" {
				missing["operation "+name] = true
			}
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				pm := p.(map[string]any)
				if d, _ := pm["description"].(string); strings.TrimSpace(d) == "" {
					missing[fmt.Sprintf("parameter %s of %s", pm["name"], name)] = true
				}
			}
		})
		schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
		for name, s := range schemas {
			walkSchema(name, s, func(where string, m map[string]any) {
				props, _ := m["properties"].(map[string]any)
				for pn, p := range props {
					pm := p.(map[string]any)
					if _, isRef := pm["$ref"]; isRef {
						continue // described by the schema it names
					}
					if d, _ := pm["description"].(string); strings.TrimSpace(d) == "" {
						missing["property "+where+"."+pn] = true
					}
				}
			})
		}
	}
	var list []string
	for m := range missing {
		list = append(list, m)
	}
	sort.Strings(list)
	for _, m := range list {
		t.Errorf("%s has no description", m)
	}
}

func TestOpenAPIDocumentHasNoNullableArrayAndOneListShape(t *testing.T) {
	for _, doc := range allDocuments(t) {
		schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
		for name, s := range schemas {
			walkSchema(name, s, func(where string, m map[string]any) {
				if ts, ok := m["type"].([]any); ok {
					for _, x := range ts {
						if x == "null" {
							t.Errorf("%s is nullable (%v)", where, ts)
						}
					}
				}
			})
		}
		operations(doc, func(name string, op map[string]any) {
			ok, _ := op["responses"].(map[string]any)["200"].(map[string]any)
			content, _ := ok["content"].(map[string]any)
			mt, _ := content["application/json"].(map[string]any)
			if mt == nil {
				return
			}
			sch := mt["schema"].(map[string]any)
			if sch["type"] == "array" {
				t.Errorf("%s answers a bare array, not a page", name)
			}
			ref, _ := sch["$ref"].(string)
			target, _ := schemas[strings.TrimPrefix(ref, "#/components/schemas/")].(map[string]any)
			props, _ := target["properties"].(map[string]any)
			if props["items"] == nil && strings.HasPrefix(name, "GET ") && strings.Contains(op["operationId"].(string), "list-") {
				t.Errorf("%s is a list without items", name)
			}
			if props["items"] != nil {
				params, _ := op["parameters"].([]any)
				var names []string
				for _, p := range params {
					names = append(names, p.(map[string]any)["name"].(string))
				}
				for _, want := range []string{"limit", "after"} {
					if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
						t.Errorf("%s pages without the %s parameter", name, want)
					}
				}
				if props["more"] == nil || props["next"] == nil {
					t.Errorf("%s: a page without more and next", name)
				}
			}
		})
		servers, _ := doc["servers"].([]any)
		if len(servers) == 0 {
			t.Errorf("the document has no servers")
		}
	}
}

func TestListsArePagedAndNeverNull(t *testing.T) {
	fb := &fakeBackend{}
	fb.ListSandboxesFunc = func(_ context.Context, _ string, _ bool) ([]client.Sandbox, error) {
		var out []client.Sandbox
		for i := range 5 {
			out = append(out, client.Sandbox{ID: fmt.Sprintf("sb-%d", i), Name: fmt.Sprintf("n%d", i)})
		}
		return out, nil
	}
	fb.ListTemplatesFunc = func(context.Context, string) ([]client.Template, error) { return nil, nil }
	c, srv := newTestServer(t, fb, aliceKey)
	get := func(path string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	var ids []string
	after, pages := "", 0
	for {
		q := "/v1/sandboxes?limit=2"
		if after != "" {
			q += "&after=" + after
		}
		st, page := get(q)
		if st != http.StatusOK {
			t.Fatalf("status %d: %v", st, page)
		}
		pages++
		for _, it := range page["items"].([]any) {
			ids = append(ids, it.(map[string]any)["id"].(string))
		}
		if page["more"] != true {
			break
		}
		after = page["next"].(string)
	}
	if pages != 3 || strings.Join(ids, ",") != "sb-0,sb-1,sb-2,sb-3,sb-4" {
		t.Fatalf("%d pages: %v", pages, ids)
	}
	// The Go client reads every page.
	all, err := c.ListSandboxes(testCtx(t), false)
	if err != nil || len(all) != 5 {
		t.Fatalf("client list: %d, %v", len(all), err)
	}
	if st, p := get("/v1/sandboxes?after=xyz"); st != http.StatusBadRequest {
		t.Fatalf("a bad cursor: %d %v", st, p)
	}
	// A backend's nil list is an empty array, not null.
	st, page := get("/v1/templates")
	if items, ok := page["items"].([]any); st != http.StatusOK || !ok || len(items) != 0 {
		t.Fatalf("empty list: %d %v", st, page)
	}
}

func TestUnroutedRequestsAreProblems(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, aliceKey)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, "/no/such/route", http.StatusNotFound, ""},
		{http.MethodGet, "/v1/no-such-route", http.StatusNotFound, ""},
		{http.MethodPatch, "/v1/sandboxes", http.StatusMethodNotAllowed, "GET"},
		{http.MethodDelete, "/healthz", http.StatusMethodNotAllowed, "GET"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var p struct {
			Status int    `json:"status"`
			Title  string `json:"title"`
			Detail string `json:"detail"`
		}
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" ||
			json.Unmarshal(body, &p) != nil || p.Status != tc.status || p.Detail == "" {
			t.Errorf("%s %s: %d %s %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if tc.allow != "" && !strings.Contains(resp.Header.Get("Allow"), tc.allow) {
			t.Errorf("%s %s: Allow %q", tc.method, tc.path, resp.Header.Get("Allow"))
		}
	}
}

func TestDocsPageIsSelfContained(t *testing.T) {
	_, srv := newTestServer(t, &fakeBackend{}, "")
	resp, err := http.Get(srv.URL + "/docs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	page := string(body)
	for _, want := range []string{"list-sandboxes", "/v1/sandboxes/{id}/exec", `id="schema-Sandbox"`, "stdout_base64"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// Nothing is loaded from elsewhere: no script at all, no remote URL in
	// a src or href, and a CSP that forbids fetching anything.
	if strings.Contains(page, "<script") {
		t.Error("the page has a script")
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//`).FindString(page); m != "" {
		t.Errorf("the page loads %s", m)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
}

func TestRawBodyRoutesRefuseJSON(t *testing.T) {
	fb := &fakeBackend{}
	called := false
	fb.WriteFileFunc = func(context.Context, string, string, string, uint32, io.Reader) (client.FileInfo, error) {
		called = true
		return client.FileInfo{}, nil
	}
	_, srv := newTestServer(t, fb, aliceKey)
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/sandboxes/sb/files/content?path=/tmp/x", strings.NewReader(`"text"`))
	req.Header.Set("Authorization", "Bearer "+aliceKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType || called {
		t.Fatalf("status %d (backend called: %v): %s", resp.StatusCode, called, body)
	}
}

// emptyPage is the body of a list with nothing in it.
const emptyPage = `{"items":[],"more":false}`

func TestExecStreamNeverSplitsAUTF8Character(t *testing.T) {
	var u utf8Split
	text := []byte("añ€😀z")
	// Every way of cutting the text in two gives two valid halves that
	// join to the text.
	for cut := 0; cut <= len(text); cut++ {
		a := u.chunk("stdout", text[:cut])
		b := u.chunk("stdout", text[cut:])
		rest := u.rest("stdout")
		if !utf8.Valid(a) || !utf8.Valid(b) || len(rest) != 0 || string(a)+string(b) != string(text) {
			t.Fatalf("cut %d: %q %q rest %q", cut, a, b, rest)
		}
	}
	// Bytes that can never be valid pass through; a cut character at the
	// very end comes out in rest.
	if got := u.chunk("stderr", []byte{'x', 0xff}); string(got) != "x\xff" {
		t.Fatalf("invalid byte held: %q", got)
	}
	if got := u.chunk("stderr", []byte("ab\xe2\x82")); string(got) != "ab" {
		t.Fatalf("cut character not held: %q", got)
	}
	if rest := u.rest("stderr"); string(rest) != "\xe2\x82" {
		t.Fatalf("rest %q", rest)
	}
}

func FuzzPageCursor(f *testing.F) {
	f.Add("", 0)
	f.Add("2", 2)
	f.Add("-1", 5)
	f.Add("99999999999999999999", 1)
	f.Add("abc", 1000)
	f.Fuzz(func(t *testing.T, after string, limit int) {
		list := []int{0, 1, 2, 3, 4}
		o, err := pageOf(list, PageQuery{After: after, Limit: limit})
		if err != nil {
			return // refused cleanly
		}
		p := o.Body
		if p.Items == nil || len(p.Items) > len(list) {
			t.Fatalf("page %+v", p)
		}
		if p.More && p.Next == "" {
			t.Fatalf("more without next: %+v", p)
		}
	})
}
