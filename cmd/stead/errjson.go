package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stead-dev/stead/client"
)

// jsonError is the one shape of every error the CLI prints with --json,
// on stderr as one line:
//
//	{"error": {"status": 404, "title": "Not Found", "detail": "sandbox x: not found", "exit_code": 3}}
//
// status is the daemon's HTTP status (0 for an error found by the CLI
// itself: bad usage, a daemon out of reach, a local file), title its
// summary, detail the message, exit_code the CLI's exit code; errors (the
// daemon's list of invalid fields) and hint (what to do next) appear when
// there is something to say.
type jsonError struct {
	Error jsonErrorBody `json:"error"`
}

// jsonErrorBody is the body of jsonError.
type jsonErrorBody struct {
	Status   int      `json:"status"`
	Title    string   `json:"title"`
	Detail   string   `json:"detail"`
	Errors   []string `json:"errors,omitempty"`
	Hint     string   `json:"hint,omitempty"`
	ExitCode int      `json:"exit_code"`
}

// reportError prints err (if any) on stderr, as text or, with --json, as
// a jsonError, and returns the exit code it stands for. args are the
// command line, read for --json when cobra failed before parsing it.
func (g *globals) reportError(root *cobra.Command, err error, args []string) int {
	if err == nil {
		return exitOK
	}
	var ec exitCodeError
	if errors.As(err, &ec) {
		return ec.code
	}
	code := exitCodeFor(err)
	hint := ""
	switch code {
	case exitUsage:
		hint = fmt.Sprintf("Run '%s --help' for usage.", root.Name())
	case exitUnauthenticated:
		hint = g.key.hint()
	}
	// The daemon's answer is complete: its problem detail names the
	// operation and the object ("cannot pause sandbox a: it is stopped").
	// The verb's own context ("pause a: ") would only repeat it, so an API
	// error is printed as the daemon wrote it; the verb's context stays on
	// local errors (a file that cannot be read, a daemon out of reach).
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		err = apiErr
	}
	if g.json || (code == exitUsage && argsWantJSON(args)) {
		body := jsonErrorBody{Detail: err.Error(), Hint: hint, ExitCode: code, Title: "error"}
		if code == exitUsage {
			body.Title = "usage error"
		}
		if apiErr != nil {
			body.Status, body.Title, body.Errors = apiErr.Status, apiErr.Title, apiErr.Errors
			body.Detail = apiErr.Detail
			if body.Title == "" {
				body.Title = http.StatusText(apiErr.Status)
			}
			if body.Detail == "" {
				body.Detail = body.Title
			}
		}
		b, _ := json.Marshal(jsonError{body})
		fmt.Fprintf(g.stderr, "%s\n", b)
		return code
	}
	fmt.Fprintf(g.stderr, "stead: %v\n", err)
	if hint != "" {
		if code == exitUnauthenticated {
			hint = "stead: " + hint
		}
		fmt.Fprintln(g.stderr, hint)
	}
	return code
}

// argsWantJSON reports whether --json is among the flags of args (before
// a "--"), for errors raised before the flags were parsed.
func argsWantJSON(args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--json":
			return true
		case strings.HasPrefix(a, "--json="):
			b, err := strconv.ParseBool(strings.TrimPrefix(a, "--json="))
			return err == nil && b
		}
	}
	return false
}
