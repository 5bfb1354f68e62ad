package recorder

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// A vfork child (vfork, and clone or clone3 with CLONE_VM|CLONE_VFORK: glibc's
// posix_spawn, system and popen, CPython's subprocess) runs in its parent's
// memory until it calls exec or exits, while the parent waits in the call.
// For the parent, that call is one syscall that returns the child's pid and
// leaves in its memory whatever the child wrote there: frames below the
// stack pointer, errno in the shared thread-local storage, an error code in
// the parent's frame. The recorder stops the parent when the child is created
// (PTRACE_EVENT_VFORK) and when the child lets the memory go
// (PTRACE_EVENT_VFORK_DONE), and takes the difference as the call's outputs:
// replay then emulates the call like any other. The child itself is not
// recorded (it is another process) and runs on untraced.
//
// The difference is found without copying the whole memory twice: a page
// the parent had not written since the interval start still shares its frame
// with the interval's shadow, and the child can only change it by breaking
// that sharing; the pages that no longer share it (the interval's written
// set, usually a few thousand) are copied at the first stop and compared at
// the second.

// vforkCapture is what the recorder saw of one thread's vfork.
type vforkCapture struct {
	child   int
	shadow  int               // the interval's shadow at the first stop
	before  map[uint64][]byte // written pages and their content at the first stop
	buf     []byte            // what before's pages are slices of
	maps    []format.Mapping
	done    bool
	outs    []format.OutBuf
	problem string // set when the outputs could not be taken
}

// vforkCaptures holds, per thread, the vforks captured and not yet matched
// with their syscall records, oldest first. The eBPF reader matches records
// on its own goroutine, hence the lock, and may read a call's record after
// the thread made its next vfork (the reader looks at the ring buffer less
// often while it finds it empty), so a record takes the capture of its own
// child.
type vforkCaptures struct {
	mu  sync.Mutex
	tid map[int][]*vforkCapture
	// threads are the threads the target started (onClone): a clone3 that
	// returned one of them made a thread, which replay creates too.
	threads map[int]bool
	// free holds page buffers for the next captures: a fresh buffer costs
	// a page fault per page in tprec (several microseconds each in a VM),
	// more than the copy itself.
	free [][]byte
}

// buf returns a buffer of n bytes, reusing a released one when it can.
func (v *vforkCaptures) buf(n int) []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, b := range v.free {
		if cap(b) >= n {
			v.free = append(v.free[:i], v.free[i+1:]...)
			return b[:n]
		}
	}
	return make([]byte, n)
}

// release gives buffers back for later captures (at most a few are kept).
func (v *vforkCaptures) release(bufs ...[]byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, b := range bufs {
		if b != nil && len(v.free) < 4 {
			v.free = append(v.free, b)
		}
	}
}

// maxPendingVforks bounds the captures a thread keeps unmatched: a record
// that never came (lost) leaves its capture behind.
const maxPendingVforks = 16

func (v *vforkCaptures) put(tid int, c *vforkCapture) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tid == nil {
		v.tid = map[int][]*vforkCapture{}
	}
	l := append(v.tid[tid], c)
	if len(l) > maxPendingVforks {
		l = l[len(l)-maxPendingVforks:]
	}
	v.tid[tid] = l
}

// get returns the thread's latest capture: the vfork it is in.
func (v *vforkCaptures) get(tid int) *vforkCapture {
	v.mu.Lock()
	defer v.mu.Unlock()
	if l := v.tid[tid]; len(l) > 0 {
		return l[len(l)-1]
	}
	return nil
}

// take removes and returns the thread's capture of child, if any.
func (v *vforkCaptures) take(tid, child int) *vforkCapture {
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	l := v.tid[tid]
	for i, c := range l {
		if c.child == child {
			if l = slices.Delete(l, i, i+1); len(l) == 0 {
				delete(v.tid, tid)
			} else {
				v.tid[tid] = l
			}
			return c
		}
	}
	return nil
}

// vforkCall reports whether rec may have made a vfork child: vfork, clone
// with CLONE_VFORK, and clone3 (whose flags are in memory; one that made a
// vfork child is told apart by the capture).
func vforkCall(rec *format.Syscall) bool {
	switch rec.Nr {
	case unix.SYS_VFORK, unix.SYS_CLONE3:
		return true
	case unix.SYS_CLONE:
		return rec.Args[0]&unix.CLONE_VFORK != 0
	}
	return false
}

// outputs gives rec, a call for which vforkCall holds, the outputs the
// capture of its thread took, and says why the call cannot be replayed when
// it cannot: a clone3 that made a thread or a process sharing memory, or a
// vfork whose child the recorder did not see through. A call that failed
// made no child and wrote nothing.
func (v *vforkCaptures) outputs(rec *format.Syscall) (why string) {
	c := v.take(rec.Tid, int(rec.Ret))
	switch {
	case c == nil && rec.Ret < 0:
		return ""
	case c == nil && rec.Nr == unix.SYS_CLONE3 && v.isThread(int(rec.Ret)):
		return ""
	case c == nil && rec.Nr == unix.SYS_CLONE3:
		return fmt.Sprintf("clone3 at seq %d made a process sharing memory without CLONE_VFORK: such processes are not recorded", rec.Seq)
	case c == nil:
		return fmt.Sprintf("%s at seq %d made a vfork child the recorder did not see", callName(rec), rec.Seq)
	case !c.done:
		return fmt.Sprintf("%s at seq %d: the end of its vfork child was not seen", callName(rec), rec.Seq)
	case c.problem != "":
		return fmt.Sprintf("%s at seq %d: %s", callName(rec), rec.Seq, c.problem)
	}
	rec.Out = c.outs
	return ""
}

// startedThread notes a thread the target started.
func (v *vforkCaptures) startedThread(tid int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.threads == nil {
		v.threads = map[int]bool{}
	}
	v.threads[tid] = true
}

func (v *vforkCaptures) isThread(tid int) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.threads[tid]
}

func callName(rec *format.Syscall) string {
	switch rec.Nr {
	case unix.SYS_VFORK:
		return "vfork"
	case unix.SYS_CLONE3:
		return "clone3"
	}
	return "clone"
}

// onVfork handles PTRACE_EVENT_VFORK in thread t: the child exists, stopped,
// and has not run. It notes the parent's written pages, then lets the child go.
func (s *session) onVfork(t *thread, child int) {
	c := &vforkCapture{child: child}
	clk := newStepClock()
	defer clk.log(s, "vfork")
	// The child is let go last: by then it has come to its first stop,
	// which a detach needs, and the parent is held either way.
	defer func() {
		if _, err := proc.Wait(child); err == nil {
			proc.Detach(child, 0)
		}
	}()
	s.vforks.put(t.tid, c)
	if s.state != stateRecording || s.shadow == nil {
		c.problem = "it started before the interval's shadow"
		return
	}
	c.shadow = s.shadow.pid
	maps, written, buf, err := s.writtenNow(clk)
	c.buf = buf
	if err != nil {
		c.problem = err.Error()
		return
	}
	c.maps = maps
	c.before = make(map[uint64][]byte, len(written))
	for i, a := range written {
		c.before[a] = buf[i*format.PageSize : (i+1)*format.PageSize]
	}
}

// onVforkDone handles PTRACE_EVENT_VFORK_DONE in thread t: the child called
// exec or exited, and the parent is about to return from the call. What
// differs from the first stop becomes the call's outputs.
func (s *session) onVforkDone(t *thread) {
	c := s.vforks.get(t.tid)
	if c == nil {
		return
	}
	clk := newStepClock()
	defer clk.log(s, "vfork done")
	var now, orig []byte
	defer func() {
		s.vforks.release(c.buf, now, orig)
		c.before, c.buf, c.maps, c.done = nil, nil, nil, true
	}()
	if c.problem != "" {
		return
	}
	if s.shadow == nil || s.shadow.pid != c.shadow {
		// The comparison needs the shadow the first stop compared with.
		c.problem = "an interval boundary came during the call"
		return
	}
	maps, written, now, err := s.writtenNow(clk)
	if err != nil {
		c.problem = err.Error()
		return
	}
	if !slices.Equal(maps, c.maps) {
		c.problem = "the vfork child changed its parent's memory map"
		return
	}
	// The pages that shared their frame with the shadow at the first stop
	// held the shadow's content then, or nothing (zeros) where it has none.
	var fresh []uint64
	for _, a := range written {
		if c.before[a] == nil {
			fresh = append(fresh, a)
		}
	}
	orig = s.vforks.buf(len(fresh) * format.PageSize)
	if err := proc.ReadPages(s.shadow.pid, fresh, orig); err != nil {
		clear(orig)
		for i, a := range fresh {
			proc.ReadBytes(s.shadow.pid, a, orig[i*format.PageSize:(i+1)*format.PageSize])
		}
	}
	next := orig
	for i, a := range written {
		page := now[i*format.PageSize : (i+1)*format.PageSize]
		was := c.before[a]
		if was == nil {
			was, next = next[:format.PageSize], next[format.PageSize:]
		}
		if lo, hi, ok := diffSpan(was, page); ok {
			c.outs = append(c.outs, format.OutBuf{Addr: a + uint64(lo), Data: bytes.Clone(page[lo:hi])})
		}
	}
	clk.mark(fmt.Sprintf("compare (%d outputs)", len(c.outs)))
}

// writtenNow reads the target's memory map, the pages of its writable
// private mappings that no longer share their frame with the interval's
// shadow, and their content (in a buffer from s.vforks, returned even with
// an error so that it goes back).
func (s *session) writtenNow(clk *stepClock) (maps []format.Mapping, written []uint64, content []byte, err error) {
	if maps, err = s.readMaps(); err != nil {
		return nil, nil, nil, err
	}
	clk.mark("maps")
	if written, err = s.privateWritten(maps); err != nil {
		return nil, nil, nil, err
	}
	clk.mark(fmt.Sprintf("pagemap (%d written)", len(written)))
	content = s.vforks.buf(len(written) * format.PageSize)
	if err = proc.ReadPages(s.pid, written, content); err != nil {
		return nil, nil, content, fmt.Errorf("read its parent's written pages: %w", err)
	}
	clk.mark("read")
	return maps, written, content, nil
}

// privateWritten lists the pages of the writable private mappings in maps
// that no longer share their frame with the interval's shadow. The child
// cannot write the others without changing the map (mprotect), which
// onVforkDone checks.
func (s *session) privateWritten(maps []format.Mapping) ([]uint64, error) {
	var writable []format.Mapping
	for _, m := range maps {
		if !m.Shared && !proc.Special(m) && m.Prot&format.ProtWrite != 0 {
			writable = append(writable, m)
		}
	}
	snap, err := s.readSnapshotOf(writable, func(format.Mapping) bool { return true })
	if err != nil {
		return nil, err
	}
	return s.writtenPages(writable, snap, s.shadow)
}

// diffSpan returns the smallest range [lo, hi) outside of which a and b are
// equal, and false when they are equal.
func diffSpan(a, b []byte) (lo, hi int, ok bool) {
	if bytes.Equal(a, b) {
		return 0, 0, false // most pages: compared at memcmp's speed
	}
	n := min(len(a), len(b))
	for lo < n && a[lo] == b[lo] {
		lo++
	}
	if lo == n {
		return 0, 0, false
	}
	hi = n
	for hi > lo && a[hi-1] == b[hi-1] {
		hi--
	}
	return lo, hi, true
}
