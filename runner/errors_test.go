package runner

import (
	"errors"
	"fmt"
	"testing"
)

// Each mark answers only for itself, through wrapping, and nil stays nil.
func TestErrorMarksAreDistinct(t *testing.T) {
	base := errors.New("boom")
	marks := []struct {
		name string
		mark func(error) error
		is   func(error) bool
	}{
		{"permanent", Permanent, IsPermanent},
		{"fatal", Fatal, IsFatal},
		{"unavailable", Unavailable, IsUnavailable},
	}
	for _, m := range marks {
		if m.mark(nil) != nil {
			t.Fatalf("%s(nil) is not nil", m.name)
		}
		err := fmt.Errorf("context: %w", m.mark(base))
		if !errors.Is(err, base) || err.Error() != "context: boom" {
			t.Fatalf("%s: wrapped error %q lost its cause", m.name, err)
		}
		for _, o := range marks {
			if got := o.is(err); got != (o.name == m.name) {
				t.Fatalf("Is%s of a %s error = %v", o.name, m.name, got)
			}
		}
	}
}
