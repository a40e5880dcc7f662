package errs

import (
	"errors"
	"fmt"
	"testing"
)

// TestQuotaErrorNamesQuotaLimitUsageAndRequest: the message names the
// quota, its limit, the usage and the request (sizes with their binary
// reading), survives wrapping, and is not the pool's ErrQuota.
func TestQuotaErrorNamesQuotaLimitUsageAndRequest(t *testing.T) {
	for _, tc := range []struct {
		e    *QuotaError
		want string
	}{
		{&QuotaError{Quota: QuotaRunningSandboxes, Limit: 2, Usage: 2, Requested: 1, Op: "start sandbox web"},
			"quota running_sandboxes: limit 2, in use 2, requested 1; "},
		{&QuotaError{Quota: QuotaCPUs, Limit: 1.5, Usage: 1, Requested: 0.75},
			"quota cpus: limit 1.5, in use 1, requested 0.75; "},
		{&QuotaError{Quota: QuotaDiskBytes, Limit: 1 << 30, Usage: 768 << 20, Requested: 512 << 20},
			"quota disk_bytes: limit 1073741824 (1 GiB), in use 805306368 (768 MiB), requested 536870912 (512 MiB); "},
		{&QuotaError{Quota: QuotaRepositoryBytes, Limit: 1000, Usage: 1000},
			"quota repository_bytes: limit 1000, in use 1000, requested 0; "},
	} {
		got := tc.e.Error()
		if len(got) < len(tc.want) || got[:len(tc.want)] != tc.want {
			t.Errorf("got %q, want it to start with %q", got, tc.want)
		}
		wrapped := fmt.Errorf("create sandbox a: %w", tc.e)
		if qe, ok := AsQuota(wrapped); !ok || qe != tc.e {
			t.Errorf("AsQuota of a wrapped %v: %v %v", tc.e, qe, ok)
		}
		if errors.Is(wrapped, ErrQuota) {
			t.Errorf("a tenant's quota error is the pool's ErrQuota")
		}
		if Message(wrapped) != wrapped.Error() {
			t.Errorf("Message changed %q to %q", wrapped.Error(), Message(wrapped))
		}
	}
	if _, ok := AsQuota(fmt.Errorf("x: %w", ErrQuota)); ok {
		t.Fatal("AsQuota of ErrQuota")
	}
}
