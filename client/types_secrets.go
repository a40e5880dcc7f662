package client

import "time"

// Secret describes a tenant's secret. Its value is never returned: the
// API takes it (SetSecret) and gives only names and times back.
type Secret struct {
	Name      string    `json:"name" doc:"The secret's name: what sandboxes reference (create --secret NAME)"`
	CreatedAt time.Time `json:"created_at" doc:"When it was created (RFC 3339)"`
	UpdatedAt time.Time `json:"updated_at" doc:"Last set (a rotation reaches a sandbox at its next start, and every exec after it)"`
	UsedBy    []string  `json:"used_by" doc:"Names of the sandboxes that reference it (soft-deleted ones included: they can come back)"`
}

// SetSecretRequest sets a secret's value.
type SetSecretRequest struct {
	Value string `json:"value" doc:"The value: UTF-8 text without NUL bytes, up to 64 KiB; never shown again"`
}

// SecretRef is a sandbox's reference to one of its tenant's secrets: the
// value reaches the sandbox at run time, as an environment variable (Env),
// as a file on a tmpfs (File), or both; the sandbox's spec keeps only this
// reference.
type SecretRef struct {
	Name string `json:"name" doc:"Name"`
	Env  string `json:"env,omitempty" doc:"Environment variable of the service and of every exec that holds the value"`
	File string `json:"file,omitempty" doc:"File under /run/secrets (a tmpfs, mode 0400, owned by the agent) that holds the value"`
}
