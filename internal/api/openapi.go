package api

import (
	"fmt"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"
)

// The OpenAPI document is meant to generate a working client as it is
// (openapi-typescript + openapi-fetch, oapi-codegen): arrays are never
// null, every error is a problem document, raw bodies are declared as
// binary. This file holds what makes those promises true.

// nonNullArrays marks every array schema of the document non-nullable:
// huma declares a Go slice as `array | null`, but every response is passed
// through emptySlices, so the server never sends null for one.
func nonNullArrays(oapi *huma.OpenAPI) {
	seen := map[*huma.Schema]bool{}
	var walk func(s *huma.Schema)
	walk = func(s *huma.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if s.Type == huma.TypeArray {
			s.Nullable = false
		}
		walk(s.Items)
		for _, p := range s.Properties {
			walk(p)
		}
		if ap, ok := s.AdditionalProperties.(*huma.Schema); ok {
			walk(ap)
		}
		for _, l := range [][]*huma.Schema{s.OneOf, s.AnyOf, s.AllOf} {
			for _, c := range l {
				walk(c)
			}
		}
		walk(s.Not)
	}
	for _, s := range oapi.Components.Schemas.Map() {
		walk(s)
	}
	for _, item := range oapi.Paths {
		for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch, item.Head, item.Options} {
			if op == nil {
				continue
			}
			for _, p := range op.Parameters {
				walk(p.Schema)
			}
			if op.RequestBody != nil {
				for _, mt := range op.RequestBody.Content {
					walk(mt.Schema)
				}
			}
			for _, r := range op.Responses {
				for _, mt := range r.Content {
					walk(mt.Schema)
				}
			}
		}
	}
}

// describeOperations gives an operation without a description its
// summary as one, so that every operation of the document has a
// description (generators put it in the doc comment of the method).
func describeOperations(oapi *huma.OpenAPI) {
	for _, item := range oapi.Paths {
		for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch, item.Head, item.Options} {
			if op != nil && op.Description == "" {
				op.Description = op.Summary + "."
			}
		}
	}
}

// emptySlices is a huma transformer that returns v with every nil slice
// reachable from it (through struct fields, pointers, slice elements and
// map values) replaced by an empty one, so that a response never carries
// null where the document promises an array. v itself is not modified: the
// parts that change are copied.
func emptySlices(_ huma.Context, _ string, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	rv := reflect.ValueOf(v)
	if !hasSlice(rv.Type(), map[reflect.Type]bool{}) {
		return v, nil
	}
	return fillSlices(rv).Interface(), nil
}

// hasSlice reports whether a value of type t can hold a slice.
func hasSlice(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Slice:
		return t.Elem().Kind() != reflect.Uint8 // []byte is a string in JSON
	case reflect.Pointer, reflect.Array:
		return hasSlice(t.Elem(), seen)
	case reflect.Map:
		return hasSlice(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && hasSlice(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// fillSlices returns a copy of v with nil slices made empty.
func fillSlices(v reflect.Value) reflect.Value {
	t := v.Type()
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return v
		}
		if v.IsNil() {
			return reflect.MakeSlice(t, 0, 0)
		}
		if !hasSlice(t.Elem(), map[reflect.Type]bool{}) {
			return v
		}
		c := reflect.MakeSlice(t, v.Len(), v.Len())
		for i := range v.Len() {
			c.Index(i).Set(fillSlices(v.Index(i)))
		}
		return c
	case reflect.Pointer:
		if v.IsNil() || !hasSlice(t.Elem(), map[reflect.Type]bool{}) {
			return v
		}
		c := reflect.New(t.Elem())
		c.Elem().Set(fillSlices(v.Elem()))
		return c
	case reflect.Map:
		if v.IsNil() || !hasSlice(t.Elem(), map[reflect.Type]bool{}) {
			return v
		}
		c := reflect.MakeMapWithSize(t, v.Len())
		it := v.MapRange()
		for it.Next() {
			c.SetMapIndex(it.Key(), fillSlices(it.Value()))
		}
		return c
	case reflect.Struct:
		if !hasSlice(t, map[reflect.Type]bool{}) {
			return v
		}
		c := reflect.New(t).Elem()
		c.Set(v)
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && hasSlice(f.Type, map[reflect.Type]bool{}) {
				c.Field(i).Set(fillSlices(v.Field(i)))
			}
		}
		return c
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		inner := fillSlices(v.Elem())
		c := reflect.New(t).Elem()
		c.Set(inner)
		return c
	}
	return v
}

// problemsForUnrouted answers a request that no route matches with a
// problem document: 404 for an unknown path and 405 (with Allow) for a
// method the path does not serve, where the mux would answer text/plain.
func (s *server) problemsForUnrouted(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// The mux's own answer: a redirect (cleaned path, trailing slash),
		// a 404 or a 405. Capture it to see which.
		rec := &captureWriter{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusNotFound:
			s.writeProblem(w, r, "route", huma.Error404NotFound(fmt.Sprintf(
				"no route %s %s: /openapi.json lists the API's routes", r.Method, r.URL.Path)))
		case http.StatusMethodNotAllowed:
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			s.writeProblem(w, r, "route", huma.Error405MethodNotAllowed(fmt.Sprintf(
				"%s %s is not served: this path allows %s", r.Method, r.URL.Path, allow)))
		default:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body)
		}
	})
}

// captureWriter records the mux's answer to an unrouted request (a few
// bytes of text).
type captureWriter struct {
	header http.Header
	status int
	body   []byte
}

// Header returns the recorded header.
func (c *captureWriter) Header() http.Header { return c.header }

// WriteHeader records the status.
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}

// Write records the body (at most 4 KiB of it).
func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if room := 4096 - len(c.body); room > 0 {
		c.body = append(c.body, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
