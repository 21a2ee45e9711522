package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestNameTakenIsAConflictWithItsReason(t *testing.T) {
	err := fmt.Errorf("creating: %w", NameTaken("a sandbox named %q already exists", "x"))
	if !errors.Is(err, ErrConflict) || !errors.Is(err, ErrNameTaken) {
		t.Fatalf("%v: want both ErrConflict and ErrNameTaken", err)
	}
	if Message(err) != `a sandbox named "x" already exists` {
		t.Fatalf("message %q: the reason must not show in it", Message(err))
	}
	if errors.Is(Conflict("sandbox is paused"), ErrNameTaken) {
		t.Fatal("a plain conflict matched ErrNameTaken")
	}
}
