package recorder

import (
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/tprec/tprec/format"
)

// busySource is a source whose activity the test sets.
type busySource struct {
	ptraceSource
	calls, pages int
	own          []uint64
}

func (b *busySource) activity(own []uint64) (int, int) {
	b.own = own
	return b.calls, b.pages
}

// skipTick skips a tick when nothing happened since it last looked, lets a
// boundary's echo settle once, and never skips for a busy target.
func TestSkipTick(t *testing.T) {
	idle := exec.Command("/bin/sleep", "100")
	if err := idle.Start(); err != nil {
		t.Fatal(err)
	}
	defer idle.Process.Kill()
	src := &busySource{}
	s := &session{pid: idle.Process.Pid, src: src, o: Options{Interval: 250 * time.Millisecond}}
	s.cur = &interval{meta: format.Interval{Start: time.Now(), Threads: []format.Thread{
		{Tid: s.pid, Rseq: format.Rseq{Addr: 0x7f0000001020, Len: 32}},
		{Tid: s.pid + 1},
	}}}
	open := func() {
		s.resetCalm()
		src.calls, src.pages = 0, 0
	}

	open()
	if !s.skipTick() || !s.skipTick() {
		t.Error("an idle target: the tick was not skipped")
	}
	if !slices.Equal(src.own, []uint64{0x7f0000001000}) {
		t.Errorf("pages of the threads' rseq areas: %#x, want [0x7f0000001000]", src.own)
	}

	// An echo: a few calls and pages after the boundary, then nothing.
	open()
	src.calls, src.pages = 4, 7
	if !s.skipTick() {
		t.Error("a boundary's echo was not let settle")
	}
	if !s.skipTick() {
		t.Error("nothing after the echo: the tick was not skipped")
	}
	src.calls++
	if s.skipTick() {
		t.Error("a call after the echo settled: the tick was skipped")
	}

	// More than an echo (two threads: 32 calls).
	open()
	src.calls = 33
	if s.skipTick() {
		t.Error("33 calls of two threads taken for an echo")
	}
	open()
	src.pages = 33
	if s.skipTick() {
		t.Error("33 written pages of two threads taken for an echo")
	}
	// Stops count as calls (ptrace).
	open()
	s.calm.stops = 40
	if s.skipTick() {
		t.Error("40 stops taken for an echo")
	}
	// Only one echo an interval.
	open()
	src.calls = 2
	s.skipTick()
	src.calls = 4
	if s.skipTick() {
		t.Error("a second small change was taken for an echo")
	}

	// A target that computes gains CPU time: never idle.
	busy := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer busy.Process.Kill()
	s.pid = busy.Process.Pid
	open()
	time.Sleep(100 * time.Millisecond)
	if s.skipTick() {
		t.Error("a busy loop (no call, no fault) was taken for idle")
	}
}
