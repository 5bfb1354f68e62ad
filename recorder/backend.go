package recorder

import "fmt"

// newSource picks the syscall log source for a backend name. It runs after
// the target is seized and before recording starts.
func newSource(backend string, pid int, logf func(string, ...any)) (source, error) {
	switch backend {
	case "ptrace", "auto":
		return ptraceSource{}, nil
	}
	return nil, fmt.Errorf("unknown backend %q: use auto or ptrace", backend)
}
