package api

import (
	"bytes"
	"html"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2"
)

// The API reference at /docs is rendered in Go from the OpenAPI document:
// one self-contained HTML page (no script, no font, no stylesheet from
// anywhere else), so it works offline and behind a strict firewall.

// docsPage is the template of /docs. Its inputs are escaped by
// html/template; typeHTML builds the only pre-escaped fragments.
var docsPage = template.Must(template.New("docs").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} API reference</title>
<style>
body{font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d1d1f;display:flex}
nav{width:18rem;flex:none;height:100vh;overflow:auto;position:sticky;top:0;background:#f5f5f7;padding:1rem;box-sizing:border-box;font-size:13px}
nav a{display:block;color:#333;text-decoration:none;padding:1px 0}nav h3{margin:1rem 0 .2rem;font-size:13px;text-transform:uppercase;color:#666}
main{padding:1rem 2rem;max-width:60rem;min-width:0}
code,.m{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
.op{border-top:1px solid #ddd;padding:.5rem 0 1rem}
.m{display:inline-block;min-width:4.2rem;font-weight:bold;color:#fff;border-radius:3px;padding:0 .3rem;text-align:center}
.GET{background:#0a7}.POST{background:#06c}.PUT{background:#c70}.DELETE{background:#c22}.PATCH{background:#85c}
table{border-collapse:collapse;width:100%;margin:.3rem 0}td,th{border:1px solid #e2e2e2;padding:.2rem .4rem;text-align:left;vertical-align:top;font-size:13px}
th{background:#fafafa}.req{color:#c22}p{margin:.3rem 0}
</style></head><body>
<nav><strong>{{.Title}} {{.Version}}</strong><br><a href="/openapi.json">openapi.json</a><a href="/openapi.yaml">openapi.yaml</a>
{{range .Groups}}<h3>{{.Tag}}</h3>{{range .Ops}}<a href="#op-{{.ID}}"><span class="m {{.Method}}" style="min-width:3.2rem">{{.Method}}</span> {{.Summary}}</a>{{end}}{{end}}
<h3>schemas</h3>{{range .Schemas}}<a href="#schema-{{.Name}}">{{.Name}}</a>{{end}}
</nav>
<main><h1>{{.Title}} API reference</h1><p>{{.Description}}</p>
{{range .Groups}}<h2 id="tag-{{.Tag}}">{{.Tag}}</h2>
{{range .Ops}}<section class="op" id="op-{{.ID}}"><h3><span class="m {{.Method}}">{{.Method}}</span> <code>{{.Path}}</code></h3>
<p><strong>{{.Summary}}</strong> <code>{{.ID}}</code></p>{{if .Description}}<p>{{.Description}}</p>{{end}}
{{if .Params}}<table><tr><th>parameter</th><th>in</th><th>type</th><th>description</th></tr>
{{range .Params}}<tr><td><code>{{.Name}}</code>{{if .Required}} <span class="req">required</span>{{end}}</td><td>{{.In}}</td><td>{{.Type}}</td><td>{{.Description}}</td></tr>{{end}}</table>{{end}}
{{if .Body}}<p>Request body{{if .BodyRequired}} (required){{end}}:</p><table>{{range .Body}}<tr><td><code>{{.ContentType}}</code></td><td>{{.Type}}</td></tr>{{end}}</table>{{end}}
<table><tr><th>status</th><th>description</th><th>body</th></tr>{{range .Responses}}<tr><td>{{.Status}}</td><td>{{.Description}}</td><td>{{range .Content}}<code>{{.ContentType}}</code> {{.Type}}<br>{{end}}</td></tr>{{end}}</table>
</section>{{end}}{{end}}
<h2>Schemas</h2>
{{range .Schemas}}<section class="op" id="schema-{{.Name}}"><h3><code>{{.Name}}</code></h3>{{if .Description}}<p>{{.Description}}</p>{{end}}
{{if .Props}}<table><tr><th>property</th><th>type</th><th>description</th></tr>{{range .Props}}<tr><td><code>{{.Name}}</code>{{if .Required}} <span class="req">required</span>{{end}}</td><td>{{.Type}}</td><td>{{.Description}}</td></tr>{{end}}</table>{{else}}<p>{{.Type}}</p>{{end}}
</section>{{end}}
</main></body></html>
`))

// docsView is what docsPage renders.
type docsView struct {
	Title, Version, Description string
	Groups                      []docsGroup
	Schemas                     []docsSchema
}

// docsGroup is the operations of one tag.
type docsGroup struct {
	Tag string
	Ops []docsOp
}

// docsOp is one operation.
type docsOp struct {
	Method, Path, ID, Summary, Description string
	Params                                 []docsField
	Body                                   []docsContent
	BodyRequired                           bool
	Responses                              []docsResponse
}

// docsField is a parameter or a property.
type docsField struct {
	Name, In, Description string
	Type                  template.HTML
	Required              bool
}

// docsContent is one media type of a body.
type docsContent struct {
	ContentType string
	Type        template.HTML
}

// docsResponse is one response of an operation.
type docsResponse struct {
	Status, Description string
	Content             []docsContent
}

// docsSchema is one component schema.
type docsSchema struct {
	Name, Description string
	Type              template.HTML
	Props             []docsField
}

// typeHTML describes a schema's type, linking named schemas.
func typeHTML(s *huma.Schema) template.HTML {
	if s == nil {
		return "any"
	}
	if s.Ref != "" {
		name := s.Ref[strings.LastIndex(s.Ref, "/")+1:]
		return template.HTML(`<a href="#schema-` + html.EscapeString(name) + `">` + html.EscapeString(name) + `</a>`)
	}
	var t string
	switch {
	case s.Type == huma.TypeArray:
		return typeHTML(s.Items) + "[]"
	case s.Type == huma.TypeObject && s.AdditionalProperties != nil:
		if ap, ok := s.AdditionalProperties.(*huma.Schema); ok {
			return "map of " + typeHTML(ap)
		}
		t = "object"
	case s.Type != "":
		t = s.Type
		if s.Format != "" {
			t += " (" + s.Format + ")"
		}
		if s.ContentEncoding != "" {
			t += " (" + s.ContentEncoding + ")"
		}
	case len(s.OneOf) > 0 || len(s.AnyOf) > 0:
		var parts []string
		for _, c := range append(slices.Clone(s.OneOf), s.AnyOf...) {
			parts = append(parts, string(typeHTML(c)))
		}
		return template.HTML(strings.Join(parts, " | "))
	default:
		t = "any"
	}
	if len(s.Enum) > 0 {
		var vals []string
		for _, e := range s.Enum {
			if str, ok := e.(string); ok {
				vals = append(vals, str)
			}
		}
		if len(vals) > 0 {
			t += ": " + strings.Join(vals, ", ")
		}
	}
	return template.HTML(html.EscapeString(t))
}

// renderDocs renders the reference page of oapi.
func renderDocs(oapi *huma.OpenAPI) ([]byte, error) {
	v := docsView{Title: "stead"}
	if oapi.Info != nil {
		v.Title, v.Version, v.Description = oapi.Info.Title, oapi.Info.Version, oapi.Info.Description
	}
	groups := map[string][]docsOp{}
	for path, item := range oapi.Paths {
		for _, mo := range []struct {
			method string
			op     *huma.Operation
		}{{"GET", item.Get}, {"PUT", item.Put}, {"POST", item.Post}, {"DELETE", item.Delete}, {"PATCH", item.Patch}} {
			if mo.op == nil {
				continue
			}
			o := mo.op
			d := docsOp{Method: mo.method, Path: path, ID: o.OperationID, Summary: o.Summary, Description: o.Description}
			for _, p := range o.Parameters {
				d.Params = append(d.Params, docsField{Name: p.Name, In: p.In, Description: p.Description, Type: typeHTML(p.Schema), Required: p.Required})
			}
			if o.RequestBody != nil {
				d.BodyRequired = o.RequestBody.Required
				for _, ct := range sortedKeys(o.RequestBody.Content) {
					d.Body = append(d.Body, docsContent{ContentType: ct, Type: typeHTML(o.RequestBody.Content[ct].Schema)})
				}
			}
			for _, status := range sortedKeys(o.Responses) {
				r := o.Responses[status]
				dr := docsResponse{Status: status, Description: r.Description}
				for _, ct := range sortedKeys(r.Content) {
					dr.Content = append(dr.Content, docsContent{ContentType: ct, Type: typeHTML(r.Content[ct].Schema)})
				}
				d.Responses = append(d.Responses, dr)
			}
			tag := "other"
			if len(o.Tags) > 0 {
				tag = o.Tags[0]
			}
			groups[tag] = append(groups[tag], d)
		}
	}
	for _, tag := range sortedKeys(groups) {
		ops := groups[tag]
		sort.Slice(ops, func(i, j int) bool {
			if ops[i].Path != ops[j].Path {
				return ops[i].Path < ops[j].Path
			}
			return ops[i].Method < ops[j].Method
		})
		v.Groups = append(v.Groups, docsGroup{Tag: tag, Ops: ops})
	}
	schemas := oapi.Components.Schemas.Map()
	for _, name := range sortedKeys(schemas) {
		s := schemas[name]
		ds := docsSchema{Name: name, Description: s.Description, Type: typeHTML(s)}
		for _, pn := range sortedKeys(s.Properties) {
			p := s.Properties[pn]
			ds.Props = append(ds.Props, docsField{Name: pn, Description: p.Description, Type: typeHTML(p), Required: slices.Contains(s.Required, pn)})
		}
		v.Schemas = append(v.Schemas, ds)
	}
	var buf bytes.Buffer
	if err := docsPage.Execute(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// registerDocs serves GET /docs: the reference page, rendered on the first
// request (when every route is registered).
func (s *server) registerDocs() {
	var (
		once sync.Once
		page []byte
		err  error
	)
	s.mux.HandleFunc("GET /docs", func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { page, err = renderDocs(s.api.OpenAPI()) })
		if err != nil {
			s.writeProblem(w, r, "render docs", err)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		// Nothing but this page itself: no script runs, nothing is fetched.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(page)
	})
}
