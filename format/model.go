// Package format owns the checkpoint file: the in-memory model of a partial
// checkpoint (this file) and its byte encoding (writer.go, reader.go), documented
// byte by byte in FORMAT.md.
//
// A checkpoint describes the last intervals of one process. Interval K holds the
// state at its start (registers of every thread, the memory map) and the original
// content of every page the process wrote during K. Together with the final memory
// (the pages as they were when the checkpoint was taken) this is Transplay's
// splicing rule: the content of page P at the start of interval K is the original
// saved by the earliest interval J >= K that wrote P, else its final content. The
// syscall log runs across all intervals, ordered by a global sequence number, and
// each interval names the first sequence number it owns.
package format

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// PageSize is the only page size the format knows (x86-64 base pages).
const PageSize = 4096

// Hash names a page's content in the page store: the first 16 bytes of its SHA-256.
type Hash [16]byte

// ZeroHash is the content hash of an all-zero page. The page store never holds a
// zero page: a reference to ZeroHash means "zeros".
var ZeroHash = hashZero()

// Checkpoint is a whole partial checkpoint in memory. Page content is not held
// here: it lives in a PageStore (the writer takes one, the reader returns one that
// reads blocks from the file on demand).
type Checkpoint struct {
	Header    Header
	Intervals []Interval
	// Final lists the content, at the moment the checkpoint was taken, of every
	// page any interval's start state may need (a page written in interval J
	// still needs its final content for a replay that starts after J). Sorted
	// by address.
	Final []PageRef
	// Syscalls is the syscall log of every thread, sorted by Seq.
	Syscalls []Syscall
	// Signals lists signals delivered to the process during the window (not the
	// final one, which is in End), sorted by Seq.
	Signals []SignalEvent
	End     EndState
}

// Header says what was recorded, where and how.
type Header struct {
	Arch          string // "x86_64"
	KernelRelease string
	CPUFlags      []string // from /proc/cpuinfo "flags" of the recording CPU
	Hostname      string
	ExePath       string
	BuildID       string // hex of the executable's GNU build-id note, "" if none
	Cmdline       []string
	Pid           int
	Backend       string // "ptrace" or "ebpf"
	Interval      time.Duration
	FullPages     bool   // every present page, not only the touched ones
	PageSetNote   string // why the page set is what it is (e.g. a trial replay fell back)
	StartTime     time.Time
	DumpTime      time.Time
	Reason        string // what triggered the dump: "signal", "exit", "request"
	Lost          uint64 // events the recorder knows it lost in the window
	// Modules is the dynamic loader's list of loaded objects at the dump,
	// in its order (version 4.2; empty in older files and for a process
	// without a dynamic loader). A debugger needs it for thread-local
	// variables: the loader's own records are rarely among the pages a
	// minimized checkpoint keeps.
	Modules []Module
	// ThreadNames are the names (comm) the process's threads had at the
	// dump (version 4.2), for a debugger's list of threads.
	ThreadNames []ThreadName
	// Schedule is the order in which a replay of several threads runs
	// their code between calls, the one the dump's trial replay verified
	// (version 7.1; ScheduleEager in older files).
	Schedule Schedule
	// XSave is where the recording CPU puts each XSAVE component beyond
	// x87 and SSE in the standard layout of the images the file holds
	// (Thread.XState...), from CPUID leaf 0xD (version 7.2; empty in older
	// files). CPUs differ there: an AMD CPU with AVX-512 puts the opmask
	// registers at byte 832, an Intel one at 1088, so a replay on the
	// other kind moves each component to its own offset.
	XSave []XComponent
}

// XComponent is one XSAVE state component of the recording CPU: its number
// (2 AVX, 5 opmask, 6 ZMM_Hi256, 7 Hi16_ZMM, 9 PKRU...), and its offset and
// size in bytes in a standard-format image.
type XComponent struct {
	Index  uint8
	Offset uint32
	Size   uint32
}

// Schedule is the order in which a replay of several threads runs each
// thread's code between two of its calls (replayer/threads.go).
type Schedule uint8

const (
	// ScheduleEager runs a thread on as soon as its call returned, up to
	// its next call.
	ScheduleEager Schedule = iota
	// ScheduleLate holds a thread at the exit of its call until its next
	// call is the log's next one: its code runs after that of every
	// thread whose call came before.
	ScheduleLate
)

func (s Schedule) String() string {
	switch s {
	case ScheduleEager:
		return "eager"
	case ScheduleLate:
		return "late"
	}
	return fmt.Sprintf("schedule %d", uint8(s))
}

// ParseSchedule is the Schedule String names.
func ParseSchedule(name string) (Schedule, error) {
	for s := ScheduleEager; s <= ScheduleLate; s++ {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown thread schedule %q (eager or late)", name)
}

// ThreadName is one thread's name, as /proc/PID/task/TID/comm gives it.
type ThreadName struct {
	Tid  int
	Name string
}

// Module is one object of the dynamic loader's link map (struct link_map).
type Module struct {
	Name    string // l_name: the path it was loaded from, "" for the program
	LinkMap uint64 // address of its struct link_map
	LAddr   uint64 // l_addr: load bias
	LD      uint64 // l_ld: address of its dynamic section
	// TLSModID is its thread-local storage module id (l_tls_modid), 0 for an
	// object without thread-local storage or when the C library did not say
	// where the field is.
	TLSModID uint64
	// TLSOffset is l_tls_offset: on x86-64 an object in the static TLS area
	// has its block at the thread pointer minus this. 0 (none) or -1 (forced
	// dynamic) mean the block is found through the thread's DTV.
	TLSOffset int64
}

// StaticTLS reports whether m's thread-local block sits at a fixed distance
// below every thread's thread pointer.
func (m Module) StaticTLS() bool { return m.TLSModID != 0 && m.TLSOffset > 0 }

// Interval is one recording interval: the state at its start and what it wrote.
type Interval struct {
	Index      int // monotonically increasing since attach
	Start      time.Time
	End        time.Time
	FirstSeq   uint64 // sequence number of the first syscall that belongs to it
	Threads    []Thread
	Maps       []Mapping
	Written    []PageRef // originals (content at interval start) of pages written in it
	Replayable bool      // false if something in it cannot be replayed (Reason says what): a replay can neither start in it nor run through it
	Reason     string
	// StartOmitted says the checkpoint does not hold the memory at this
	// interval's start (StartState would be wrong there), so a replay cannot
	// begin here: asked to, it begins at the nearest earlier interval whose
	// start is stored and runs through. A minimized checkpoint stores one
	// start, that of the first interval its trial replay ran from: the
	// later versions of the pages a busy server rewrites cost more than
	// everything else together. Files before version 3.0 store every start.
	StartOmitted bool
	// Digests verify a replay that arrives at this interval's start from an
	// earlier one: for the pages EndDigestPages names (the stack page under
	// the thread's rsp, the pages the previous interval wrote), the
	// DigestPage hash of their content there. They are hashes to compare
	// with, not stored pages. Files before version 3.0 have none: a reader
	// computes them from the stored start (BoundaryDigests).
	Digests []PageRef
}

// Thread is one thread's CPU state.
type Thread struct {
	Tid     int
	Regs    Regs
	XState  []byte // PTRACE_GETREGSET NT_X86_XSTATE image (FP/SSE/AVX...)
	SigMask uint64
	// InSyscall is set when the thread was stopped inside a syscall that the
	// kernel will restart; Regs are then normalized to "about to execute it".
	InSyscall bool
	// Rseq is the thread's registered restartable-sequences area (zero if
	// none). The kernel rewrites it behind the program's back (cpu_id after
	// a migration), so it is left out of the end-state digests.
	Rseq Rseq
}

// Thread returns the state of thread tid at the interval start.
func (iv *Interval) Thread(tid int) (Thread, error) {
	i := slices.IndexFunc(iv.Threads, func(t Thread) bool { return t.Tid == tid })
	if i < 0 {
		return Thread{}, fmt.Errorf("interval %d has no thread %d", iv.Index, tid)
	}
	return iv.Threads[i], nil
}

// Rseq is a thread's rseq registration (PTRACE_GET_RSEQ_CONFIGURATION).
type Rseq struct {
	Addr uint64
	Len  uint32
	Sig  uint32
}

// Regs is the x86-64 general register file in the order of the kernel's
// struct user_regs_struct (arch/x86/include/asm/user_64.h).
type Regs struct {
	R15, R14, R13, R12, Rbp, Rbx, R11, R10, R9, R8, Rax, Rcx, Rdx, Rsi, Rdi uint64
	OrigRax, Rip, Cs, Eflags, Rsp, Ss, FsBase, GsBase, Ds, Es, Fs, Gs       uint64
}

// Prot bits of a mapping (PROT_READ/WRITE/EXEC values).
const (
	ProtRead  = 1
	ProtWrite = 2
	ProtExec  = 4
)

// Mapping is one line of /proc/pid/maps.
type Mapping struct {
	Start, End uint64
	Prot       uint32
	Shared     bool
	Offset     uint64
	Dev        string // "fd:01"
	Inode      uint64
	Path       string // file path or "[heap]", "[stack]", "[vdso]"..., "" for anonymous
}

// AnonymousPrivate reports whether m is memory of the process's own that no
// file backs: the heap, the stack, anonymous mmaps (named or not). A page of
// it that was never present reads as zeros.
func (m Mapping) AnonymousPrivate() bool {
	return !m.Shared && m.Inode == 0 &&
		(m.Path == "" || m.Path == "[heap]" || m.Path == "[stack]" || strings.HasPrefix(m.Path, "[anon:"))
}

// PageRef says: the page at Addr has the content named by Hash.
type PageRef struct {
	Addr uint64
	Hash Hash
}

// Syscall is one completed syscall as the program saw it.
type Syscall struct {
	Seq  uint64 // global order across the process's threads, from 1
	Tid  int
	Nr   int
	Args [6]uint64
	Ret  int64
	// Out lists the memory the kernel wrote into the process for this call.
	Out []OutBuf
	// Pages holds, for a call that mapped a file (mmap with a descriptor),
	// the file's content for the pages of the new mapping the window may
	// touch: a replay maps anonymous memory there and fills it in.
	Pages []PageRef
	// Rip of the instruction after the syscall instruction.
	Rip uint64
}

// OutBuf is a range of process memory written by the kernel during a syscall.
type OutBuf struct {
	Addr uint64
	Data []byte
}

// SignalEvent is a signal delivered to a thread during the window.
type SignalEvent struct {
	Seq     uint64 // delivered after syscall Seq (0 = before the first)
	Tid     int
	Signo   int
	Siginfo []byte // 128-byte siginfo_t
	Regs    Regs   // registers at delivery
	// Interval is the Index of the interval the delivery happened in
	// (version 3.1; 0 in older files).
	Interval int
	// Handler is what the delivery did, seen at the first instruction of
	// the program's handler; nil when the recorder did not see it (the
	// interval is then not replayable).
	Handler *Delivery
}

// Delivery is the state the kernel left a thread in when it delivered a
// signal to a handler: a replay reproduces the delivery by writing Frame at
// FrameAddr and setting the registers, the extended state and the signal
// mask, rather than asking its own kernel to deliver.
type Delivery struct {
	Regs      Regs   // rip at the handler, rsp at the frame
	XState    []byte // NT_X86_XSTATE image (the kernel gives the handler a clean FPU state)
	SigMask   uint64 // blocked signals in the handler
	FrameAddr uint64 // where the signal frame begins (the handler's rsp)
	Frame     []byte // the frame: return address, ucontext, siginfo, FPU state
	// Digests, for a signal delivered in user code, are those of the pages
	// EndDigestPages names at the delivery (the stack page, the pages the
	// interval had written so far), computed with the rseq areas of the
	// interval's threads: with the registers they tell the delivery point
	// from another pass over the same instruction.
	Digests []PageRef
}

// AtSyscallExit reports whether the signal was delivered on the way out of
// a syscall (Seq), rather than into user code the thread was running: only
// such a delivery has a place a replay can find without a branch counter.
func (s *SignalEvent) AtSyscallExit() bool { return int64(s.Regs.OrigRax) >= 0 }

// Interrupted reports whether the signal interrupted the syscall it was
// delivered in (orig_rax) before that call completed: the call returned a
// restart code, which the delivery turns into EINTR or a restart of the call,
// and the log does not hold it. Seq is then the call before it.
func (s *SignalEvent) Interrupted() bool {
	switch int64(s.Regs.Rax) {
	case -512, -513, -514, -516: // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK
		return s.AtSyscallExit()
	}
	return s.Rewound()
}

// Rewound reports whether the signal came to a call the kernel had already
// set up for its restart: a stop of the recorder's (an interval boundary)
// interrupted the call first, and the kernel, with no handler to run for
// that stop, moved the thread back onto the syscall instruction with the
// number to issue in rax (the call's own, or restart_syscall's), rcx still
// pointing after the instruction. The handler's return then issues it.
func (s *SignalEvent) Rewound() bool {
	return s.AtSyscallExit() && s.Regs.Rcx == s.Regs.Rip+2 && (s.Regs.Rax == s.Regs.OrigRax || s.Regs.Rax == SysRestartSyscall)
}

// SysRestartSyscall is x86-64's restart_syscall.
const SysRestartSyscall = 219

// End reasons.
const (
	EndSignal  = "signal"  // a fatal signal; Signo and Siginfo are set
	EndExit    = "exit"    // the process called exit_group; ExitCode is set
	EndRequest = "request" // the user asked for a dump; the process ran on
)

// EndState is where the recorded execution stopped.
type EndState struct {
	Kind     string
	Tid      int
	Signo    int
	Siginfo  []byte // 128-byte siginfo_t, as PTRACE_GETSIGINFO returned it
	ExitCode int
	Regs     Regs
	XState   []byte
	LastSeq  uint64 // last syscall completed before the end
	Rseq     Rseq   // the ending thread's rseq area, masked in the digests
	// Digests of pages at the end (the stack page under rsp and the pages written
	// in the last interval) so a replay can tell a matching iteration of a loop
	// from another one with the same registers. Computed by DigestPage.
	Digests []PageRef
	// Threads holds the state of the process's other threads at the end,
	// normalized as Interval.Threads are (none in files before 4.1, or of
	// a single-threaded process).
	Threads []Thread
}
