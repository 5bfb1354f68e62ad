package proc

import (
	"testing"
)

// GetRegs and SetRegs allocate nothing: a replay makes both for every call
// it emulates, and a trial replay of a busy window makes them half a
// million times in a process whose heap holds the whole window. They also
// round-trip: the registers set are the registers read, and SetRax sets
// rax alone.
func TestRegsDoNotAllocate(t *testing.T) {
	onStoppedSleeper(t, func(pid int, _ *Mem) error {
		regs, err := GetRegs(pid)
		if err != nil {
			return err
		}
		changed := regs
		changed.R15 ^= 0x5a5a
		if err := SetRegs(pid, changed); err != nil {
			return err
		}
		if got, _ := GetRegs(pid); got != changed {
			t.Errorf("read back %+v after setting %+v", got, changed)
		}
		// SetRax changes rax and nothing else.
		changed.Rax = 0xfeed_f00d_1234
		if err := SetRax(pid, changed.Rax); err != nil {
			return err
		}
		if got, _ := GetRegs(pid); got != changed {
			t.Errorf("read back %+v after SetRax(%#x) on %+v", got, changed.Rax, changed)
		}
		if err := SetRegs(pid, regs); err != nil {
			return err
		}
		var failed error
		allocs := testing.AllocsPerRun(200, func() {
			r, err := GetRegs(pid)
			if err == nil {
				err = SetRegs(pid, r)
			}
			if err != nil && failed == nil {
				failed = err
			}
		})
		if failed != nil {
			return failed
		}
		if allocs != 0 {
			t.Errorf("GetRegs and SetRegs allocate %.1f times a pair", allocs)
		}
		return nil
	})
}
