// Package e2b serves E2B's API on stead's daemon, so that agent code
// written for E2B's official SDKs runs unmodified against stead: the
// control plane (POST /v2/sandboxes, GET /sandboxes/{id}, pause,
// connect, timeout, list, kill ...) and the in-sandbox data plane
// ("envd": Connect RPC process.Process and filesystem.Filesystem, and
// the plain HTTP /files and /health), mapped onto stead's own sandbox
// operations through one Backend — an E2B sandbox is a stead sandbox.
//
// Handler.Mount puts both planes in front of stead's API handler on the
// same listener: a request carrying an E2b-Sandbox-Id header (the SDKs'
// E2B_SANDBOX_URL mode), or whose Host is 49983-<id>.<domain> when a
// domain is configured, goes to the data plane; the paths /sandboxes...,
// /v2/sandboxes... and /snapshots... go to the control plane; everything
// else to stead's API. docs/e2b.md lists what is supported.
package e2b
