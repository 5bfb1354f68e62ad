package proc

import (
	"bytes"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// StepOut over a `syscall` (a vDSO's fallback to the kernel, or a stub's)
// leaves r11 as the thread running freely would have it: the flags without
// the trap flag the step set. The thread is Debian's sleep, made to run
// `mov eax, SYS_getpid; syscall` placed in its vDSO's padding.
func TestStepOutOverSyscall(t *testing.T) {
	code := []byte{0xb8, unix.SYS_GETPID, 0, 0, 0, 0x0f, 0x05}
	onPaddingCode(t, code, func(pid int, at uint64) error {
		out, err := StepOut(pid, func(rip uint64) bool { return rip >= at && rip < at+uint64(len(code)) }, 10)
		if err != nil || !out {
			return fmt.Errorf("step out: %v, %v", out, err)
		}
		after, err := GetRegs(pid)
		if err != nil {
			return err
		}
		if after.Rip != at+uint64(len(code)) || int64(after.Rax) != int64(pid) || after.Rcx != after.Rip {
			t.Errorf("after the steps: rip %#x rax %d rcx %#x; want rip %#x, rax %d (getpid), rcx the rip", after.Rip, int64(after.Rax), after.Rcx, at+uint64(len(code)), pid)
		}
		if after.R11&trapFlag != 0 {
			t.Errorf("r11 %#x holds the trap flag", after.R11)
		}
		if after.R11&^(trapFlag|0x10000) != after.Eflags&^(trapFlag|0x10000) {
			t.Errorf("r11 %#x, flags %#x: r11 is not the flags", after.R11, after.Eflags)
		}
		return nil
	})
}

// onPaddingCode runs body on Debian's sleep, stopped, with code written at
// the start of the last 16 bytes of its vDSO (padding after its ELF image,
// as placeTrampoline finds) and its rip there, then puts bytes and
// registers back.
func onPaddingCode(t *testing.T, code []byte, body func(pid int, at uint64) error) {
	t.Helper()
	onStoppedSleeper(t, func(pid int, mem *Mem) error {
		maps, err := ReadMaps(pid)
		if err != nil {
			return err
		}
		var at uint64
		for _, m := range maps {
			if m.Path == "[vdso]" {
				at = m.End - 16
			}
		}
		old := make([]byte, 16)
		if err := mem.ReadAt(old, at); err != nil {
			return err
		}
		if !bytes.Equal(old, make([]byte, 16)) {
			return fmt.Errorf("the end of the vDSO at %#x is not padding on this kernel", at)
		}
		defer mem.WriteAt(old, at)
		before, err := GetRegs(pid)
		if err != nil {
			return err
		}
		if err := mem.WriteAt(code, at); err != nil {
			return err
		}
		r := before
		r.Rip = at
		r.OrigRax = ^uint64(0) // no restart of the sleep it stopped in
		if err := SetRegs(pid, r); err != nil {
			return err
		}
		if err := body(pid, at); err != nil {
			return err
		}
		return SetRegs(pid, before)
	})
}
