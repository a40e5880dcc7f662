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

func TestTooLargeIsAlsoInvalidAndReadsClean(t *testing.T) {
	err := fmt.Errorf("put checkpoint plan: document is 2000000 bytes, over the limit of 1048576 bytes: %w", ErrTooLarge)
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v: is too large %v, is invalid %v", err, errors.Is(err, ErrTooLarge), errors.Is(err, ErrInvalid))
	}
	if errors.Is(fmt.Errorf("x: %w", ErrInvalid), ErrTooLarge) {
		t.Fatal("every invalid error is too large")
	}
	if got, want := Message(err), "put checkpoint plan: document is 2000000 bytes, over the limit of 1048576 bytes"; got != want {
		t.Fatalf("Message %q, want %q", got, want)
	}
}
