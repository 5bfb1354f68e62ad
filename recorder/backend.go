package recorder

import (
	"fmt"
)

// newSource picks the syscall log source for a backend name. It runs after
// the target is seized and before recording starts. "auto" takes eBPF when
// its programs load and says in one line why not otherwise; "ebpf" fails with
// that reason instead.
func newSource(o Options, pid int, logf func(string, ...any)) (source, error) {
	switch o.Backend {
	case "ptrace":
		return ptraceSource{}, nil
	case "ebpf":
		return newEBPFSource(pid, o.RingbufSize, logf)
	case "auto":
		src, err := newEBPFSource(pid, o.RingbufSize, logf)
		if err != nil {
			logf("%v; using the ptrace backend (one stop per syscall, slower)", err)
			return ptraceSource{}, nil
		}
		return src, nil
	}
	return nil, fmt.Errorf("unknown backend %q: use auto, ebpf or ptrace", o.Backend)
}
