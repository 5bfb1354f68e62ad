package proc

import (
	"fmt"
	"runtime"
	"strings"
)

// Tracer runs functions on one OS thread that never changes: the kernel only
// accepts ptrace requests from the thread that attached (kernel/ptrace.c:
// ptrace_check_attach compares child->parent with current).
type Tracer struct {
	ch   chan func()
	done chan struct{}
}

// NewTracer starts the pinned goroutine.
func NewTracer() *Tracer {
	t := &Tracer{ch: make(chan func()), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		// Never unlocked: if the goroutine ended, its thread would exit with it,
		// which detaches every tracee of that thread.
		for {
			select {
			case fn := <-t.ch:
				fn()
			case <-t.done:
				return
			}
		}
	}()
	return t
}

// Do runs fn on the tracer thread and returns its error. A panic in fn is
// returned as an error (PanicError) rather than taking the whole program
// down: the thread must live on, and a recorder whose replay hit a bug must
// still write its checkpoint and leave its target alone.
func (t *Tracer) Do(fn func() error) error {
	errc := make(chan error, 1)
	t.ch <- func() {
		defer func() {
			if r := recover(); r != nil {
				errc <- Recovered(r)
			}
		}()
		errc <- fn()
	}
	return <-errc
}

// PanicError is a panic turned into an error by Recovered.
type PanicError struct {
	Value any
	Where string // the function and line that panicked
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("internal error: %v (at %s)", e.Value, e.Where)
}

// Recovered makes an error of r, a value recover returned, naming where the
// panic happened. Call it from the deferred function that recovered.
func Recovered(r any) error {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	where := "?"
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") && !strings.HasSuffix(f.Function, ".Recovered") {
			where = fmt.Sprintf("%s, %s:%d", f.Function, f.File, f.Line)
			break
		}
		if !more {
			break
		}
	}
	return &PanicError{Value: r, Where: where}
}

// Close stops the tracer goroutine. Its thread exits with it (it stays locked),
// so every tracee it still held is detached by the kernel.
func (t *Tracer) Close() { close(t.done) }
