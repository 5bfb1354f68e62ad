package recorder

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// cpuYield moves every thread of tprec to the SCHED_IDLE policy while a
// crashed process's handler runs, and back. The checkpoint of the crash is
// written in the background meanwhile, on one or two CPUs (the trial
// replay, the compression), and a thread of tprec that woke on the CPU of
// the handler preempted it. A preempted thread whose rseq area holds
// garbage is killed by the kernel on its way back (its critical-section
// pointer no longer points anywhere): redis-server's crash report tests
// its memory, that area among it, and was cut off in 4 runs of 8 by a
// SIGSEGV from the kernel's return to user mode after a reschedule IPI
// (bpftrace on signal_generate), never without tprec. An idle-policy
// thread never preempts a normal one at its wakeup. Threads made meanwhile
// inherit the policy; off puts every thread back to what tprec had.
type cpuYield struct {
	saved *unix.SchedAttr
}

func (y *cpuYield) on() {
	if y.saved != nil {
		return
	}
	attr, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return
	}
	y.saved = attr
	applySched(&unix.SchedAttr{Policy: unix.SCHED_IDLE})
}

func (y *cpuYield) off() {
	if y.saved == nil {
		return
	}
	a := *y.saved
	y.saved = nil
	applySched(&a)
}

// applySched sets the scheduling attributes of every thread of tprec.
func applySched(a *unix.SchedAttr) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			attr := *a
			unix.SchedSetAttr(tid, &attr, 0)
		}
	}
}
