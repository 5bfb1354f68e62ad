package proc

import (
	"runtime"
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

// Do runs fn on the tracer thread and returns its error.
func (t *Tracer) Do(fn func() error) error {
	errc := make(chan error, 1)
	t.ch <- func() { errc <- fn() }
	return <-errc
}

// Close stops the tracer goroutine. Its thread exits with it (it stays locked),
// so every tracee it still held is detached by the kernel.
func (t *Tracer) Close() { close(t.done) }
