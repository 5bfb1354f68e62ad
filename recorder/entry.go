package recorder

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/replayer"
	"golang.org/x/sys/unix"
)

// The dynamic loader of a program that was just executed reads the time
// stamp counter (rdtsc: glibc's ld.so times its own start-up) and cpuid
// (the CPU features it stores for the IFUNC resolvers, with the number of
// the CPU it ran on) into its data, before the program's first instruction.
// Neither instruction is a syscall, so the log does not hold what they gave,
// and a replay from the exec on ends with different bytes in ld.so's data.
// So after an exec tprec stops the program at its entry point (AT_ENTRY)
// with a hardware breakpoint, takes an interval boundary there and marks the
// interval that held the loader's start-up not replayable: a program that
// crashes early is replayed from its entry point. A hardware breakpoint
// writes no byte of the program, and the kernel drops it at the next exec.
// Where the debug registers do not work (replayer.HardwareBreakpoints), an
// int3 in the program's private copy of the page does the same.
// A statically linked program (no AT_BASE) runs its C library's start-up
// after the entry point; it is not stopped.

// Auxiliary vector types (include/uapi/linux/auxvec.h).
const (
	atBase  = 7
	atEntry = 9
)

// armEntry sets a hardware breakpoint at the entry point of the program the
// target has just executed, if it has a dynamic loader.
func (s *session) armEntry() {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", s.pid))
	if err != nil {
		s.logf("read auxv: %v: the loader's start-up stays in the first interval", err)
		return
	}
	var base, entry uint64
	for i := 0; i+16 <= len(b); i += 16 {
		switch binary.LittleEndian.Uint64(b[i:]) {
		case atBase:
			base = binary.LittleEndian.Uint64(b[i+8:])
		case atEntry:
			entry = binary.LittleEndian.Uint64(b[i+8:])
		}
	}
	if base == 0 || entry == 0 {
		return
	}
	if ok, _ := replayer.HardwareBreakpoints(); !ok {
		s.armEntryInt3(entry)
		return
	}
	// DR7 bit 0 enables DR0 locally; R/W 00 and length 00 make it an
	// instruction breakpoint, which stops before the instruction runs.
	if err := proc.SetDebugReg(s.pid, 0, entry); err != nil {
		s.logf("entry point breakpoint: %v", err)
		return
	}
	if err := proc.SetDebugReg(s.pid, 7, 1); err != nil {
		s.logf("entry point breakpoint: %v", err)
		return
	}
	s.entry = entry
}

// armEntryInt3 is armEntry where the debug registers do not work: an int3
// written over the first byte of the entry point (the text page becomes
// the target's private copy, with its bytes restored at the stop).
func (s *session) armEntryInt3(entry uint64) {
	mem, err := proc.OpenMem(s.pid)
	if err != nil {
		s.logf("entry point breakpoint: %v", err)
		return
	}
	defer mem.Close()
	orig := make([]byte, 1)
	if err := mem.ReadAt(orig, entry); err != nil {
		s.logf("entry point breakpoint: %v", err)
		return
	}
	if err := mem.WriteAt([]byte{0xcc}, entry); err != nil {
		s.logf("entry point breakpoint: %v", err)
		return
	}
	s.entry, s.entryInt3, s.entryOrig = entry, true, orig[0]
	s.ownWrites = append(s.ownWrites, entry&^(format.PageSize-1))
}

// disarmEntry removes the entry point breakpoint.
func (s *session) disarmEntry() {
	if s.entry == 0 {
		return
	}
	entry := s.entry
	s.entry = 0
	if s.entryInt3 {
		s.entryInt3 = false
		mem, err := proc.OpenMem(s.pid)
		if err == nil {
			err = mem.WriteAt([]byte{s.entryOrig}, entry)
			mem.Close()
			s.ownWrites = append(s.ownWrites, entry&^(format.PageSize-1))
		}
		if err != nil && !proc.Gone(err) && !errors.Is(err, fs.ErrNotExist) {
			s.logf("remove the entry point breakpoint: %v", err)
		}
		return
	}
	if err := proc.SetDebugReg(s.pid, 7, 0); err != nil && !proc.Gone(err) {
		s.logf("remove the entry point breakpoint: %v", err)
	}
}

// atEntry reports whether a SIGTRAP stop of thread t is the entry point
// breakpoint: before the instruction for the debug register, after the
// int3.
func (s *session) atEntry(t *thread, sig int) bool {
	if s.entry == 0 || t.tid != s.pid || sig != int(unix.SIGTRAP) {
		return false
	}
	regs, err := proc.GetRegs(t.tid)
	if err != nil {
		return false
	}
	if s.entryInt3 {
		return regs.Rip == s.entry+1
	}
	return regs.Rip == s.entry
}

// onEntry handles the entry point breakpoint: the interval that held the
// loader's start-up ends here, and the program goes on as if nothing had
// stopped it.
func (s *session) onEntry(t *thread) error {
	if s.entryInt3 {
		regs, err := proc.GetRegs(t.tid)
		if err == nil {
			regs.Rip = s.entry
			err = proc.SetRegs(t.tid, regs)
		}
		if err != nil {
			return err
		}
	}
	s.disarmEntry()
	if s.state == stateRecording && s.cur != nil {
		s.notReplayable("the dynamic loader started the program in it: its start-up reads the time stamp counter and cpuid, which are not recorded (the next interval starts at the program's entry point)")
		err := s.holdPatiently(t.tid)
		if err == nil {
			err = s.boundary()
		}
		if rerr := s.releaseOthers(); err == nil {
			err = rerr
		}
		if err != nil && !proc.Gone(err) {
			return err
		}
	}
	return s.resume(t.tid, 0)
}
