package replayer

import (
	"testing"

	"github.com/tprec/tprec/format"
	"golang.org/x/sys/unix"
)

// The calls of a redis-server soak run (ptrace backend) around its main
// thread signalling jemalloc's background thread: the waker's condition
// variable wake, the woken thread's wait for the mutex, the waker's unlock
// wake. The wait is logged before the wake that ended it when the ptrace
// backend collected the woken thread's exit stop first; replay must then
// let the waker release the mutex before the woken thread goes on.
func TestReleasedBefore(t *testing.T) {
	const cond, mutex = 0x7f89e7416634, 0x7f89e7416678
	futex := func(tid int, addr, op uint64, ret int64) format.Syscall {
		return format.Syscall{Tid: tid, Nr: unix.SYS_FUTEX, Args: [6]uint64{addr, op, 2}, Ret: ret}
	}
	const waker, woken = 14198, 14205
	signal := futex(waker, cond, 0x81, 1)
	unlock := futex(waker, mutex, 0x81, 1)
	if !wakeUnderLock(&signal, &unlock) {
		t.Fatal("a condition variable's wake then the mutex's unlock wake: want the waker held")
	}
	for _, c := range []struct {
		name    string
		between []format.Syscall
		want    bool
	}{
		{"nothing between", nil, false},
		{"the woken thread's condition wait only", []format.Syscall{futex(woken, cond, 0x189, 0)}, false},
		{"its mutex wait found the mutex released", []format.Syscall{futex(woken, cond, 0x189, 0), futex(woken, mutex, 0x80, -int64(unix.EAGAIN))}, true},
		{"its mutex wait, ended by the unlock, logged first", []format.Syscall{futex(woken, cond, 0x189, 0), futex(woken, mutex, 0x80, 0)}, true},
		{"a wait for another futex", []format.Syscall{futex(woken, mutex+8, 0x80, 0)}, false},
		{"a wake of the mutex, not a wait", []format.Syscall{futex(woken, mutex, 0x81, 0)}, false},
		{"a wait that timed out", []format.Syscall{futex(woken, mutex, 0x80, -int64(unix.ETIMEDOUT))}, false},
	} {
		if got := releasedBefore(&unlock, c.between); got != c.want {
			t.Errorf("%s: releasedBefore = %v, want %v", c.name, got, c.want)
		}
	}
}
