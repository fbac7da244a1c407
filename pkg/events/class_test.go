package events

import (
	"errors"
	"fmt"
	"testing"
)

// TestClassErrorThroughWrapping: the class survives fmt.Errorf wrapping
// and errors.Is still reaches the cause; an unclassed error has none.
func TestClassErrorThroughWrapping(t *testing.T) {
	cause := errors.New("pull access denied")
	err := fmt.Errorf("image: %w", Classed(ClassBuild, cause))
	if c, ok := ClassOf(err); !ok || c != ClassBuild {
		t.Errorf("class %q %v", c, ok)
	}
	if !errors.Is(err, cause) {
		t.Error("cause lost")
	}
	if _, ok := ClassOf(cause); ok {
		t.Error("an unclassed error has a class")
	}
	if Classed(ClassInfra, nil) != nil {
		t.Error("Classed(nil) is not nil")
	}
	if e := Classf(ClassRefused, "task %s: %w", "t", cause); e.Error() != "task t: pull access denied" || !errors.Is(e, cause) {
		t.Errorf("Classf: %v", e)
	}
}
