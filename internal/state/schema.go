package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/stead-dev/stead/internal/errs"
)

// schemaURL is the location a document's schema is compiled under. It is
// never fetched: relative references resolve against it and fail to load.
const schemaURL = "https://stead.invalid/checkpoint.schema.json"

// schemaCacheSize bounds the compiled schemas kept; the cache starts over
// when it is full.
const schemaCacheSize = 256

// parseDocument checks that b is one JSON value of at most MaxDocumentBytes
// and returns it decoded (numbers as json.Number, so nothing is rounded).
func parseDocument(b []byte) (any, error) {
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("empty document; send a JSON value: %w", errs.ErrInvalid)
	case len(b) > MaxDocumentBytes:
		return nil, fmt.Errorf("document is %d bytes, over the limit of %d bytes: %w", len(b), MaxDocumentBytes, errs.ErrTooLarge)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("document is not valid JSON: %v: %w", err, errs.ErrInvalid)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("document is not one JSON value (more follows the first): %w", errs.ErrInvalid)
	}
	return v, nil
}

// compileSchema resolves a JSON Schema (draft 2020-12, or draft-07 when its
// $schema says so) with github.com/google/jsonschema-go. References outside
// the schema itself are refused: a user's schema must not make the daemon
// read files or fetch URLs. Anything that does not resolve is
// errs.ErrInvalid. (This library, unlike the one used before, compiles no
// meta-schemas at package init, which every stead process start paid for.)
func compileSchema(schema []byte) (*jsonschema.Resolved, error) {
	if _, err := parseDocument(schema); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var sch jsonschema.Schema
	if err := json.Unmarshal(schema, &sch); err != nil {
		return nil, fmt.Errorf("schema: %s: %w", oneLine(err), errs.ErrInvalid)
	}
	rs, err := sch.Resolve(&jsonschema.ResolveOptions{BaseURI: schemaURL})
	if err != nil {
		return nil, fmt.Errorf("schema does not compile: %s: %w", oneLine(err), errs.ErrInvalid)
	}
	return rs, nil
}

// validate checks doc against sch; a failure is errs.ErrInvalid saying
// where and why.
func validate(sch *jsonschema.Resolved, doc any) error {
	// The validator types json.Number as a string: it checks the document
	// with numbers as float64 (the stored document keeps its exact text).
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("document: %w", err)
	}
	var plain any
	if err := json.Unmarshal(b, &plain); err != nil {
		return fmt.Errorf("document: %w", err)
	}
	if err := sch.Validate(plain); err != nil {
		return fmt.Errorf("document does not match its schema: %s: %w", oneLine(err), errs.ErrInvalid)
	}
	return nil
}

// oneLine flattens a multi-line error message.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// schemaCache keeps compiled schemas by the SHA-256 of their text, so a
// put compiles its document's schema only the first time.
type schemaCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*jsonschema.Resolved
}

func newSchemaCache() *schemaCache {
	return &schemaCache{m: map[[sha256.Size]byte]*jsonschema.Resolved{}}
}

// get returns schema compiled.
func (c *schemaCache) get(schema []byte) (*jsonschema.Resolved, error) {
	sum := sha256.Sum256(schema)
	c.mu.Lock()
	sch, ok := c.m[sum]
	c.mu.Unlock()
	if ok {
		return sch, nil
	}
	sch, err := compileSchema(schema)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= schemaCacheSize {
		clear(c.m)
	}
	c.m[sum] = sch
	c.mu.Unlock()
	return sch, nil
}
