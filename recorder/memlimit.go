package recorder

import (
	"math"
	"runtime/debug"
	"sync"
)

// memLimit is the Go memory limit tprec runs under (main sets it from
// --max-memory), what the checkpoints being finished add to it (extra),
// what the interval being recorded is expected to hold (recording), and the
// copies of a kept shadow's diverged pages (kept, kept.go).
var memLimit struct {
	sync.Mutex
	base, extra, recording, kept int64
	set                          bool // base was read from the runtime
	assembling, gcPercent        int  // dumps assembling; GOGC before the first
}

// applyLimit sets the Go memory limit from memLimit; it must be held.
// Without a limit (none set at all) it does nothing.
func applyLimit() bool {
	if !memLimit.set {
		cur := debug.SetMemoryLimit(-1)
		if cur == math.MaxInt64 {
			return false
		}
		memLimit.base, memLimit.set = cur, true
	}
	debug.SetMemoryLimit(memLimit.base + memLimit.extra + memLimit.recording + memLimit.kept)
	return true
}

// dumpMemory raises the Go memory limit, if one is set, by n bytes while a
// checkpoint is finished, and returns what puts it back. The limit bounds
// the ring; a dump holds a copy of the window besides it (a redis window:
// 500,000 records and 2,500 pages), and at the unraised limit the
// collector ran back to back, marking 150 MB a dozen times a second, a
// third of the CPU the trial replay needed.
func dumpMemory(n int64) (restore func()) {
	memLimit.Lock()
	defer memLimit.Unlock()
	memLimit.extra += n
	if !applyLimit() {
		memLimit.extra -= n
		return func() {}
	}
	return func() {
		memLimit.Lock()
		defer memLimit.Unlock()
		memLimit.extra -= n
		applyLimit()
	}
}

// assembling turns off the collector's start by the heap's growth (GOGC)
// while a dump assembles its records, if a memory limit is set (which then
// starts it alone), and returns what turns it back on. The list of records
// is one allocation (70 MB for a redis window) that started a collection
// whose marking it had to assist: 40 to 300 ms of a 100 ms assembly. Only
// there: through the rest of the dump, without collections, every
// allocation took fresh memory from the system, and a python3 dump's write
// took 500-710 ms instead of 260-310.
func assembling() (restore func()) {
	memLimit.Lock()
	defer memLimit.Unlock()
	if !memLimit.set {
		return func() {}
	}
	if memLimit.assembling++; memLimit.assembling == 1 {
		memLimit.gcPercent = debug.SetGCPercent(-1)
	}
	return func() {
		memLimit.Lock()
		defer memLimit.Unlock()
		if memLimit.assembling--; memLimit.assembling == 0 {
			debug.SetGCPercent(memLimit.gcPercent)
		}
	}
}

// recordingMemory sets what the Go memory limit, if one is set, leaves for
// the interval being recorded, beyond the ring: the size of the last
// interval's log, which the next one is expected to match. The limit from
// --max-memory counts the ring alone; a program logging more than the whole
// budget a quarter second (dd reading /dev/zero in 512-byte blocks: about
// 70 MB) kept the heap at the limit, and the collector then ran back to
// back, its assists slowing the ring buffer's reader until the program had
// to be held for it: dd took 1.0-1.4 s recorded instead of 0.3-0.4 s.
func recordingMemory(n int64) {
	memLimit.Lock()
	defer memLimit.Unlock()
	memLimit.recording = n
	applyLimit()
}

// keptMemory raises the Go memory limit, if one is set, by the n bytes of
// the buffers that hold a kept shadow's pages (noteKeptBuffers).
func keptMemory(n int64) {
	memLimit.Lock()
	defer memLimit.Unlock()
	memLimit.kept = n
	applyLimit()
}
