package replayer

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// Layout of the stub's only page. The code sits right after the ELF and program
// headers; the rest of the page is scratch space for data the replayer hands to
// injected syscalls (the seccomp program).
const (
	stubEntryOff   = 0x78 // int3: the stub stops here before anything else runs
	stubGadgetOff  = 0x79 // syscall; int3: every injected syscall goes through it
	stubBatchOff   = 0x80 // the batch loop (batchCode)
	stubScratchOff = 0x100
	stubSize       = format.PageSize
)

// batchCode makes the r12 calls of the table at r13, each entry the call's
// number and six arguments (7 words), and stops at its int3 once all are
// made, or after the first that fails (a result from -4095 to -1: rax holds
// it, and r12 counts that call and those not made). It writes no memory:
// the stub's page is not writable to the stub.
//
//	loop: mov rax, [r13]; mov rdi, [r13+8]; mov rsi, [r13+16]
//	      mov rdx, [r13+24]; mov r10, [r13+32]; mov r8, [r13+40]
//	      mov r9, [r13+48]; syscall
//	      cmp rax, -4095; jae done
//	      add r13, 56; dec r12; jnz loop
//	done: int3
var batchCode = []byte{
	0x49, 0x8b, 0x45, 0x00, 0x49, 0x8b, 0x7d, 0x08, 0x49, 0x8b, 0x75, 0x10,
	0x49, 0x8b, 0x55, 0x18, 0x4d, 0x8b, 0x55, 0x20, 0x4d, 0x8b, 0x45, 0x28,
	0x4d, 0x8b, 0x4d, 0x30, 0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff,
	0x73, 0x09, 0x49, 0x83, 0xc5, 0x38, 0x49, 0xff, 0xcc, 0x75, 0xd1, 0xcc,
}

// batchEntry is the size of a call in the batch table; batchMax, how many
// calls the scratch space holds.
const (
	batchEntry = 7 * 8
	batchMax   = (stubSize - stubScratchOff) / batchEntry
)

// stubImage returns a static ELF64 executable of one page loaded read+exec at
// base: ELF header, one PT_LOAD program header, then `int3; syscall; int3`.
func stubImage(base uint64) []byte {
	img := make([]byte, stubSize)
	le := binary.LittleEndian
	copy(img, []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* little endian */, 1 /* version */})
	le.PutUint16(img[16:], 2)  // e_type ET_EXEC
	le.PutUint16(img[18:], 62) // e_machine EM_X86_64
	le.PutUint32(img[20:], 1)  // e_version
	le.PutUint64(img[24:], base+stubEntryOff)
	le.PutUint64(img[32:], 64) // e_phoff
	le.PutUint16(img[52:], 64) // e_ehsize
	le.PutUint16(img[54:], 56) // e_phentsize
	le.PutUint16(img[56:], 1)  // e_phnum
	ph := img[64:]
	le.PutUint32(ph[0:], 1)   // PT_LOAD
	le.PutUint32(ph[4:], 4|1) // PF_R|PF_X
	le.PutUint64(ph[8:], 0)   // p_offset
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], stubSize) // p_filesz
	le.PutUint64(ph[40:], stubSize) // p_memsz
	le.PutUint64(ph[48:], format.PageSize)
	copy(img[stubEntryOff:], []byte{0xcc, 0x0f, 0x05, 0xcc})
	copy(img[stubBatchOff:], batchCode)
	return img
}

// stub is the started stub process, stopped at its entry breakpoint.
type stub struct {
	pid int // the thread group: the first thread, and the process
	// tid is the thread ptrace requests go to: the one the engine runs
	// now (threads.go); pid until a replay makes more threads.
	tid int
	// threads lists the threads made after the first (threads.go).
	threads []int
	base    uint64
	gadget  uint64
	cpu     int
	proc    *os.Process
	reaped  bool
}

// startStub writes the stub to a memfd and executes it as a ptrace child of
// the calling thread, which must be the tracer thread. On return the stub is
// stopped at its entry int3 with no file descriptor open, tracer and stub pinned
// to the same CPU (a ptrace stop across CPUs costs several times more here).
func startStub(base uint64, cpuOffset int) (s *stub, err error) {
	img := stubImage(base)
	fd, err := unix.MemfdCreate("tpreplay-stub", unix.MFD_CLOEXEC|0x10 /* MFD_EXEC */)
	if err != nil {
		// Kernels before 6.3 reject MFD_EXEC; their memfds are executable anyway.
		fd, err = unix.MemfdCreate("tpreplay-stub", unix.MFD_CLOEXEC)
	}
	if err != nil {
		return nil, fmt.Errorf("create stub memfd: %w", err)
	}
	rw := os.NewFile(uintptr(fd), "tpreplay-stub")
	defer rw.Close()
	if _, err := rw.Write(img); err != nil {
		return nil, fmt.Errorf("write stub: %w", err)
	}
	// Executing a file that is open for writing fails with ETXTBSY on some
	// kernels: hand the child a read-only descriptor of the same memfd.
	ro, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, fmt.Errorf("reopen stub memfd: %w", err)
	}
	defer ro.Close()

	cpu, err := pinSelf(cpuOffset)
	if err != nil {
		return nil, err
	}
	p, err := os.StartProcess("/proc/self/fd/3", []string{"tpreplay-stub"}, &os.ProcAttr{
		Env:   []string{},
		Files: []*os.File{nil, nil, nil, ro},
		Sys:   &syscall.SysProcAttr{Ptrace: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return nil, fmt.Errorf("start stub: %w", err)
	}
	s = &stub{pid: p.Pid, tid: p.Pid, base: base, gadget: base + stubGadgetOff, cpu: cpu, proc: p}
	defer func() {
		if err != nil {
			s.kill()
		}
	}()
	// PTRACE_TRACEME before execve: the exec reports a SIGTRAP stop. Registers
	// are not safe to change there (DESIGN: the exec stop is inside execve),
	// so run on to the entry int3 first.
	st, err := proc.Wait(s.pid)
	if err != nil {
		return s, err
	}
	if st.Exited() || st.Status.StopSignal() != unix.SIGTRAP {
		return s, fmt.Errorf("start stub: unexpected first stop: %v", st)
	}
	if err := proc.SetOptions(s.pid, unix.PTRACE_O_TRACESYSGOOD|unix.PTRACE_O_EXITKILL); err != nil {
		return s, fmt.Errorf("start stub: set ptrace options: %w", err)
	}
	if err := proc.Resume(unix.PTRACE_CONT, s.pid, 0); err != nil {
		return s, fmt.Errorf("start stub: %w", err)
	}
	st, err = proc.Wait(s.pid)
	if err != nil {
		return s, err
	}
	if st.Signal() != int(unix.SIGTRAP) {
		return s, fmt.Errorf("start stub: expected the entry breakpoint, got %v", st)
	}
	regs, err := proc.GetRegs(s.pid)
	if err != nil {
		return s, fmt.Errorf("start stub: %w", err)
	}
	if regs.Rip != s.gadget {
		return s, fmt.Errorf("start stub: stopped at %#x, expected %#x", regs.Rip, s.gadget)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(s.pid, &set); err != nil {
		return s, fmt.Errorf("pin stub to cpu %d: %w", cpu, err)
	}
	// Close every descriptor the stub inherited (the memfd at 3, anything the
	// runtime leaked): the replayed program must not be able to reach a file.
	if _, err := s.inject(unix.SYS_CLOSE_RANGE, 0, ^uint64(0)>>32, 0); err != nil {
		return s, err
	}
	return s, nil
}

// pinSelf pins the calling OS thread to one CPU it may run on and returns it:
// the last allowed one (the first one tends to take interrupts), or offset
// places before it (wrapping around).
func pinSelf(offset int) (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, fmt.Errorf("read cpu affinity: %w", err)
	}
	var allowed []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			allowed = append(allowed, i)
		}
	}
	cpu := -1
	if n := len(allowed); n > 0 {
		cpu = allowed[n-1-((offset%n)+n)%n]
	}
	if cpu < 0 {
		return 0, fmt.Errorf("read cpu affinity: empty set")
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return 0, fmt.Errorf("pin tracer to cpu %d: %w", cpu, err)
	}
	return cpu, nil
}

// inject runs one syscall in the stopped stub through its gadget and returns
// the raw result (negative errno on failure).
func (s *stub) inject(nr int, args ...uint64) (int64, error) {
	res, err := proc.Inject(s.tid, s.gadget, nr, args...)
	if err != nil {
		return 0, err
	}
	return res.Ret, nil
}

// injectOK is inject for calls that must succeed.
func (s *stub) injectOK(what string, nr int, args ...uint64) (int64, error) {
	ret, err := s.inject(nr, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if ret < 0 && ret > -4096 {
		return ret, fmt.Errorf("%s: %w", what, unix.Errno(-ret))
	}
	return ret, nil
}

// call is one syscall of a batch (injectBatch), and what it does, for an
// error.
type call struct {
	what string
	nr   int
	args [6]uint64
}

// injectBatch makes calls in the stopped stub, in order, batchMax at a time
// through the batch loop in its page: a stop for each batch instead of one
// for each call (a trial replay's rebuild of a redis-server window made 290
// to 810 calls, 35-60 us each). It stops at the first call that fails, with
// an error naming it. The calls' results are not kept: it suits calls whose
// success is all that counts. It uses the stub's scratch space, so it must
// not run once the seccomp filter lives there.
func (s *stub) injectBatch(mem *proc.Mem, calls []call) error {
	if len(calls) == 0 {
		return nil
	}
	saved, err := proc.GetRegs(s.tid)
	if err != nil {
		return fmt.Errorf("inject a batch of calls: %w", err)
	}
	table := make([]byte, 0, batchMax*batchEntry)
	for len(calls) > 0 {
		batch := calls[:min(len(calls), batchMax)]
		calls = calls[len(batch):]
		table = table[:0]
		for _, c := range batch {
			table = binary.LittleEndian.AppendUint64(table, uint64(c.nr))
			for _, a := range c.args {
				table = binary.LittleEndian.AppendUint64(table, a)
			}
		}
		at := s.base + stubScratchOff
		if err := mem.WriteAt(table, at); err != nil {
			return fmt.Errorf("inject a batch of calls: %w", err)
		}
		r := saved
		r.Rip, r.R13, r.R12, r.OrigRax = s.base+stubBatchOff, at, uint64(len(batch)), ^uint64(0)
		if err := proc.SetRegs(s.tid, r); err != nil {
			return fmt.Errorf("inject a batch of calls: %w", err)
		}
		if err := proc.Resume(unix.PTRACE_CONT, s.tid, 0); err != nil {
			return fmt.Errorf("inject a batch of calls: %w", err)
		}
		st, err := proc.Wait(s.tid)
		if err != nil {
			return fmt.Errorf("inject a batch of calls: %w", err)
		}
		if st.Exited() || st.Status.StopSignal() != unix.SIGTRAP {
			return fmt.Errorf("inject a batch of calls (%s...): unexpected stop %v", batch[0].what, st)
		}
		cur, err := proc.GetRegs(s.tid)
		if err != nil {
			return fmt.Errorf("inject a batch of calls: %w", err)
		}
		if want := s.base + stubBatchOff + uint64(len(batchCode)); cur.Rip != want || cur.R12 > uint64(len(batch)) {
			return fmt.Errorf("inject a batch of calls: stopped at %#x with %d calls left, expected %#x", cur.Rip, cur.R12, want)
		}
		if err := proc.SetRegs(s.tid, saved); err != nil {
			return fmt.Errorf("inject a batch of calls: restore registers: %w", err)
		}
		if cur.R12 > 0 {
			return fmt.Errorf("%s: %w", batch[len(batch)-int(cur.R12)].what, unix.Errno(-int64(cur.Rax)))
		}
	}
	return nil
}

// kill ends the stub and reaps it. It must run on the tracer thread.
func (s *stub) kill() {
	if s == nil || s.reaped {
		return
	}
	killAndReap(s.pid, s.threads...)
	s.reaped = true
	_ = s.proc.Release()
}

// killAndReap ends a traced process of ours and waits for its end. threads
// are its threads besides the first: traced, each one's end is reported to
// us, and the first thread's only once they are all reaped. It must run on
// the tracer thread.
func killAndReap(pid int, threads ...int) {
	_ = unix.Kill(pid, unix.SIGKILL)
	for _, tid := range append(threads, pid) {
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(tid, &ws, unix.WALL, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || (got == tid && (ws.Exited() || ws.Signaled())) {
				break
			}
		}
	}
}

var hwbp struct {
	once sync.Once
	ok   bool
	why  string
}

// HardwareBreakpoints reports whether the debug registers work on this
// machine, and if not, why. Some hypervisors accept writes to DR0-DR7 and
// never raise the debug exception (a PVM guest on AMD EPYC seen: gdb says
// "No hardware breakpoint support in the target"), so the answer comes
// from trying once per process: a stub stopped at its `syscall` gets an
// execution breakpoint on that very instruction and is resumed; where the
// registers work it stops with SIGTRAP before the instruction runs, where
// they do not it enters the syscall (a getpid). Callers fall back to int3.
// TPREC_NO_DEBUG_REGISTERS=1 in the environment makes the answer no, to
// test those paths on a machine where the registers work.
func HardwareBreakpoints() (bool, string) {
	hwbp.once.Do(func() {
		if os.Getenv("TPREC_NO_DEBUG_REGISTERS") != "" {
			hwbp.why = "TPREC_NO_DEBUG_REGISTERS is set"
			return
		}
		done := make(chan struct{})
		go func() {
			// startStub pins the calling thread; a goroutine that exits
			// locked takes its thread with it.
			runtime.LockOSThread()
			hwbp.ok, hwbp.why = probeDebugRegs()
			close(done)
		}()
		<-done
	})
	return hwbp.ok, hwbp.why
}

func probeDebugRegs() (bool, string) {
	s, err := startStub(0x1000_0000_0000, 0)
	if err != nil {
		return false, "the probe could not start: " + err.Error()
	}
	defer s.kill()
	regs, err := proc.GetRegs(s.pid)
	if err != nil {
		return false, "the probe could not start: " + err.Error()
	}
	regs.Rax = unix.SYS_GETPID
	if err := proc.SetRegs(s.pid, regs); err != nil {
		return false, "the probe could not start: " + err.Error()
	}
	if err := proc.SetDebugReg(s.pid, 0, s.gadget); err != nil {
		return false, err.Error()
	}
	if err := proc.SetDebugReg(s.pid, 7, 1); err != nil {
		return false, err.Error()
	}
	if err := proc.Resume(unix.PTRACE_SYSCALL, s.pid, 0); err != nil {
		return false, "the probe could not resume: " + err.Error()
	}
	st, err := proc.Wait(s.pid)
	if err != nil {
		return false, err.Error()
	}
	if st.Signal() != int(unix.SIGTRAP) {
		return false, fmt.Sprintf("an execution breakpoint set in DR0 did not fire (the probe's next stop: %v)", st)
	}
	dr6, err := proc.GetDebugReg(s.pid, 6)
	if err != nil {
		return false, err.Error()
	}
	if dr6&1 == 0 {
		return false, fmt.Sprintf("an execution breakpoint set in DR0 did not fire (SIGTRAP with DR6 %#x)", dr6)
	}
	return true, ""
}
