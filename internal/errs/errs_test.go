package errs

import (
	"errors"
	"fmt"
	"testing"
)

func TestMessageLeavesOutClassNamesButKeepsExplanations(t *testing.T) {
	errno := errors.New("permission denied")
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("cannot pause sandbox a: it is stopped (start it instead): %w", ErrConflict), "cannot pause sandbox a: it is stopped (start it instead)"},
		{fmt.Errorf("copy /w/secret: %w", fmt.Errorf("%w: %w", ErrForbidden, errno)), "copy /w/secret: permission denied"},
		{fmt.Errorf("%w: the root has no parent", ErrInvalid), "the root has no parent"},
		{fmt.Errorf("authenticate: invalid API key: %w", ErrUnauthenticated), "authenticate: invalid API key"},
		{fmt.Errorf("append to run r: %w", ErrNotFound), "append to run r: not found"},
		{fmt.Errorf("read /x: %w", fmt.Errorf("%w: %w", ErrNotFound, errors.New("no such file or directory"))), "read /x: no such file or directory"},
		{fmt.Errorf("sandbox x: %w (stead list shows them)", ErrNotFound), "sandbox x: not found (stead list shows them)"},
		{fmt.Errorf("disk quota of sandbox a: %w", ErrQuota), "disk quota of sandbox a: quota exceeded"},
		{errors.New("a conflict: in the text, not the class"), "a conflict: in the text, not the class"},
	}
	for _, tc := range cases {
		if got := Message(tc.err); got != tc.want {
			t.Errorf("Message(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
