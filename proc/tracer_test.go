package proc

import (
	"errors"
	"strings"
	"testing"
)

// A panic on the tracer thread comes back as an error naming where it
// happened, and the thread goes on serving.
func TestTracerPanicIsAnError(t *testing.T) {
	tr := NewTracer()
	defer tr.Close()
	err := tr.Do(func() error {
		var s []byte
		_ = s[:2:2][1] // index out of range
		return nil
	})
	var pe *PanicError
	if !errors.As(err, &pe) || !strings.Contains(pe.Where, "TestTracerPanicIsAnError") {
		t.Fatalf("Do returned %v, want a PanicError naming the test function", err)
	}
	if err := tr.Do(func() error { return nil }); err != nil {
		t.Errorf("the tracer does not serve after a panic: %v", err)
	}
}
