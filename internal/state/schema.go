package state

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

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
		return nil, fmt.Errorf("document is %d bytes, at most %d: %w", len(b), MaxDocumentBytes, errs.ErrInvalid)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("document is not valid JSON: %v: %w", err, errs.ErrInvalid)
	}
	return v, nil
}

// noLoader refuses to load any referenced schema: a user's schema must not
// make the daemon read files or fetch URLs.
type noLoader struct{}

// Load refuses url.
func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema references %s: only references within the schema itself are supported", url)
}

// compileSchema compiles a JSON Schema (draft 2020-12 unless its $schema
// names another draft). Anything that does not compile is errs.ErrInvalid.
func compileSchema(schema []byte) (*jsonschema.Schema, error) {
	doc, err := parseDocument(schema)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("schema: %v: %w", err, errs.ErrInvalid)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("schema does not compile: %s: %w", oneLine(err), errs.ErrInvalid)
	}
	return sch, nil
}

// validate checks doc against sch; a failure is errs.ErrInvalid saying
// where and why.
func validate(sch *jsonschema.Schema, doc any) error {
	err := sch.Validate(doc)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if errors.As(err, &verr) {
		return fmt.Errorf("document does not match its schema: %s: %w", validationMessage(verr), errs.ErrInvalid)
	}
	return fmt.Errorf("document does not match its schema: %s: %w", oneLine(err), errs.ErrInvalid)
}

// validationMessage lists the leaf failures of verr as
// "at /path: message; ...".
func validationMessage(verr *jsonschema.ValidationError) string {
	out := verr.BasicOutput()
	var msgs []string
	for _, u := range out.Errors {
		if u.Error == nil {
			continue
		}
		msg := u.Error.String()
		loc := u.InstanceLocation
		if loc == "" {
			loc = "/"
		}
		msgs = append(msgs, "at "+loc+": "+msg)
	}
	if len(msgs) == 0 {
		return oneLine(verr)
	}
	return strings.Join(msgs, "; ")
}

// oneLine flattens a multi-line error message.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// schemaCache keeps compiled schemas by the SHA-256 of their text, so a
// put compiles its document's schema only the first time.
type schemaCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*jsonschema.Schema
}

func newSchemaCache() *schemaCache {
	return &schemaCache{m: map[[sha256.Size]byte]*jsonschema.Schema{}}
}

// get returns schema compiled.
func (c *schemaCache) get(schema []byte) (*jsonschema.Schema, error) {
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
