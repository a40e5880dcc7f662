package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stead-dev/stead/internal/errs"
)

// TestNodeCallProblemsKeepTheirClass: a node call's problem answer is an
// error of the class its status says (so a 404 from the node holding a
// copy is a 404 to the client, not a 500), and reads as the detail alone.
func TestNodeCallProblemsKeepTheirClass(t *testing.T) {
	for _, tc := range []struct {
		status int
		class  error
	}{{http.StatusNotFound, errs.ErrNotFound}, {http.StatusConflict, errs.ErrConflict}, {http.StatusBadRequest, errs.ErrInvalid},
		{http.StatusTooManyRequests, errs.ErrQuota}, {http.StatusInternalServerError, nil}} {
		c := statusClass(tc.status)
		if tc.class == nil {
			if c != nil {
				t.Errorf("status %d: class %v, want none", tc.status, c)
			}
			continue
		}
		err := fmt.Errorf("lost copy x is not on this node (HTTP %d)%w", tc.status, c)
		if !errors.Is(err, tc.class) || err.Error() != fmt.Sprintf("lost copy x is not on this node (HTTP %d)", tc.status) {
			t.Errorf("status %d: %q, is %v: %v", tc.status, err, tc.class, errors.Is(err, tc.class))
		}
	}
}
