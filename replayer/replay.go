package replayer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"

	"golang.org/x/sys/unix"
)

// Options tune one replay.
type Options struct {
	// From is the Index of the interval to start at; -1 picks the oldest
	// replayable one. When the checkpoint does not store that interval's
	// start (Interval.StartOmitted), the replay begins at the nearest earlier
	// interval it stores and runs through (Result.From says where).
	From int
	// OutputDir, when set, receives what the program writes (write, pwrite64,
	// writev, pwritev, sendto, sendmsg), appended to OutputDir/fd-N.out.
	OutputDir string
	// Log receives progress messages when Verbose is set.
	Log     io.Writer
	Verbose bool
	// Timeout bounds the run; 0 means max(30 s, 20 times the recorded window).
	Timeout time.Duration
	// Lazy serves every page on its first access instead of writing them all
	// up front, and reports the pages served in Result.Served: the exact set
	// of pages the window touches (see lazy.go).
	Lazy bool
	// WrittenFirst, with Lazy, writes the pages the recording shows the
	// replayed intervals writing before the replay starts, and counts them
	// as served (space.go, rebuildLazy).
	WrittenFirst bool
	// FilePage, with Lazy, gives the content of a page of a file mapping
	// made in the window that its record does not hold (a mapping larger
	// than the recorder reads whole): the record's Seq and the page's
	// address in that mapping. The replay serves the page with it, and
	// Result.ServedMapped names it like the record's own.
	FilePage func(seq, addr uint64) (format.Hash, bool)
	// Until, when positive, is the Index of a later interval: the replay
	// ends where that interval began and is verified against the state the
	// recording saw there (registers, and the digests of the stack page and
	// of the pages the interval before it wrote, as for a dump request),
	// instead of against the recorded end. Replays of consecutive pieces of
	// a window can then run side by side (recorder: the trial replay).
	Until int
	// CPU picks the CPU the tracer and the replayed process are pinned to:
	// this many places before the last CPU the caller may use.
	CPU int
	// Schedule, when set, overrides the order the checkpoint says its
	// threads replay in (Header.Schedule; threads.go).
	Schedule *format.Schedule
	// AnyCPU replays on a CPU that lacks instruction-set extensions the
	// recording CPU had (CheckCPU): the caller has said so to the user.
	// An instruction this CPU lacks then ends the replay as a divergence.
	AnyCPU bool
	// Stub, when set, is called with the pid of the process the replay
	// runs in once it exists (alive), and again before it is killed: the
	// recorder sets the scheduling policy of its trial replays' processes
	// (recorder/yield.go).
	Stub func(pid int, alive bool)
}

// Result describes a verified replay.
type Result struct {
	From      int // Index of the interval the replay started at
	Syscalls  int // syscall records replayed
	Intervals int // intervals replayed (from the start interval to the end)
	Threads   int // threads the replay ran (replayer/threads.go)
	End       format.EndState
	// Until is the Index of the interval whose start the replay stopped at
	// and verified (Options.Until), 0 when it ran to the recorded end.
	Until int
	Rip   uint64 // rip at the verified end
	// Symbol names the function holding Rip ("crash_here+0x1c") when the
	// recorded executable is on this machine with the same build-id.
	Symbol   string
	Duration time.Duration
	// Ready is the part of Duration before the program ran: the plan of
	// the replay and the rebuild of its process.
	Ready time.Duration
	// Served lists, with Options.Lazy, the addresses of the pages the replay
	// touched, in order.
	Served []uint64
	// ServedMapped lists, with Options.Lazy, for each file mmap of the
	// window (by its record's Seq), the addresses (in that mapping) of the
	// pages of it the replay touched, in order: served from the record's
	// Pages, Options.FilePage, or the start state of a replay that began
	// with the mapping in place. A program that maps a file again and
	// again touches some pages of each mapping, not each page it touched
	// in any.
	ServedMapped map[uint64][]uint64
	// InProcess counts the calls the replayed process completed itself,
	// without a ptrace stop (inprocess.go).
	InProcess int
	// XTests counts the xtest instructions this CPU, without TSX, ran as
	// patched (xtest.go).
	XTests int
	// WrittenFirst counts the pages of Served written before the replay
	// started (Options.WrittenFirst).
	WrittenFirst int
	// EndPasses counts the passes over the end rip when the process
	// compared them itself (endsearch.go); 0 when each pass stopped, or
	// the replay needed no search.
	EndPasses int
	// EndWords lists the memory words the end search compared in the
	// process (endsearch.go), and the pages the stop searches of threads
	// held at their stops compared a word of (passOnFromEnd): a file that
	// is to be verified the same way must hold the content of their pages
	// where the recording ended.
	EndWords []uint64
	// endRedirects counts the jumps the end search in the process moved to
	// a displaced instruction's copy, endRetargeted the calls it made go
	// there themselves (for tests).
	endRedirects, endRetargeted int
	// endAfterRet: the end, a ret, was searched where it returns to.
	endAfterRet bool
	// endPunned: the search's jmp was a punned one (endsearch.go).
	endPunned bool
	// InCall names the call the recording ended inside (a crash or a dump
	// request while it blocked), "" when it ended between calls.
	InCall string
	// Schedule is the order the replay ran several threads in (threads.go).
	Schedule format.Schedule
}

// Summary is the one line tpreplay prints for a verified replay.
func (r *Result) Summary() string {
	where := fmt.Sprintf("rip=%#x", r.Rip)
	if r.Symbol != "" {
		where += " in " + r.Symbol
	}
	if r.InCall != "" {
		where += ", inside " + r.InCall
	}
	var what string
	switch r.End.Kind {
	case format.EndExit:
		what = fmt.Sprintf("exit status %d", r.End.ExitCode)
	case format.EndRequest:
		what = "dump request"
	default:
		what = "signal " + signalName(r.End.Signo)
	}
	ran := fmt.Sprintf("%d syscalls, %d intervals", r.Syscalls, r.Intervals)
	if r.Threads > 1 {
		ran += fmt.Sprintf(", %d threads", r.Threads)
	}
	sched := ""
	if r.Schedule != format.ScheduleEager {
		sched = fmt.Sprintf("; threads run on the %v schedule", r.Schedule)
	}
	if r.Until > 0 {
		return fmt.Sprintf("verified: %s, the state at the start of interval %d matches (%s%s)", ran, r.Until, where, sched)
	}
	return fmt.Sprintf("verified: %s, end state matches (%s, %s%s)", ran, where, what, sched)
}

func signalName(sig int) string {
	if n := unix.SignalName(syscall.Signal(sig)); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", sig)
}

// Run replays checkpoint c, whose page content comes from pages, and returns
// the result when the replay reaches the recorded end state, a *Divergence
// when it does not, or another error when the checkpoint cannot be replayed
// here. The replay process is always killed and reaped before Run returns.
func Run(ctx context.Context, c *format.Checkpoint, pages format.PageSource, opts Options) (*Result, error) {
	start := time.Now()
	e, err := prepare(c, pages, opts)
	if err != nil {
		return nil, err
	}
	out, err := newOutputs(opts.OutputDir)
	if err != nil {
		return nil, err
	}
	e.out = out
	defer out.close()

	tr := proc.NewTracer()
	defer tr.Close()
	defer tr.Do(func() error {
		if e.mem != nil {
			e.mem.Close()
		}
		if e.stub != nil && opts.Stub != nil {
			opts.Stub(e.stub.pid, false)
		}
		e.stub.kill()
		e.inproc.close()
		return nil
	})
	err = tr.Do(e.launch)
	if err != nil {
		return nil, fmt.Errorf("rebuild process: %w", err)
	}
	if testHookReady != nil {
		testHookReady(e.stub.pid)
	}
	ready := time.Since(start)
	e.logf("stub %d ready after %v, replaying %d syscalls", e.stub.pid, ready.Round(time.Microsecond), len(e.log))

	// The watchdog stops the stub with SIGSTOP (through its pidfd) when the
	// deadline passes or ctx ends; the loop sees the stop and reports it.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTimer(e.timeout)
		defer t.Stop()
		select {
		case <-t.C:
			e.stopReq.Store(stopDeadline)
		case <-ctx.Done():
			e.stopReq.Store(stopCanceled)
		case <-done:
			return
		}
		_ = e.stub.proc.Signal(syscall.SIGSTOP)
	}()
	var res *Result
	err = tr.Do(func() error {
		var err error
		res, err = e.loop()
		return err
	})
	close(done)
	wg.Wait()
	if err != nil {
		if e.stopReq.Load() == stopCanceled {
			return nil, ctx.Err()
		}
		var d *Divergence
		if errors.As(err, &d) {
			if d.Hint == "" { // the divergence's own (illegalHint) goes first
				d.Hint = sharedHint(c.Intervals[e.k:e.until])
			}
			if d.Signal = e.sigSearch; d.Signal != nil && d.Hint == "" {
				d.Hint = fmt.Sprintf("looking for where %s was delivered in user code after syscall #%d", signalName(d.Signal.Signo), d.Signal.Seq)
			}
			if d.Hint == "" {
				d.Hint = e.pendingSignalHint()
			}
			if d.Hint == "" && e.multi() {
				d.Hint = e.threadsHint()
			}
			if d.Hint == "" {
				d.Hint = xsaveHint(c.Header.XSave, proc.LocalXSaveMask())
			}
		}
		return nil, err
	}
	res.Duration, res.Ready = time.Since(start), ready
	res.Symbol = Symbolize(c, res.Rip)
	return res, nil
}

// pendingSignalHint names, for a divergence, a signal the recording had
// delivered to the current thread by its last completed call which this
// replay has not delivered: the first thing to look at when a replay goes
// its own way around a handler.
func (e *engine) pendingSignalHint() string {
	if e.nextSig >= len(e.sigs) {
		return ""
	}
	ev := &e.sigs[e.nextSig]
	if ev.Seq > e.ownLastSeq() {
		return ""
	}
	var where string
	switch {
	case ev.Interrupted():
		where = fmt.Sprintf("interrupting syscall %d (rax %d, rip %#x)", int64(ev.Regs.OrigRax), int64(ev.Regs.Rax), ev.Regs.Rip)
	case ev.AtSyscallExit():
		where = fmt.Sprintf("on the way out of syscall %d", int64(ev.Regs.OrigRax))
	default:
		where = fmt.Sprintf("in user code at rip %#x", ev.Regs.Rip)
	}
	return fmt.Sprintf("the recording delivered %s after syscall #%d, %s, in interval %d; this replay has not delivered it", signalName(ev.Signo), ev.Seq, where, ev.Interval)
}

// testHookReady, set by tests only, sees the stub once it is rebuilt.
var testHookReady func(pid int)

const (
	stopDeadline = 1
	stopCanceled = 2
)

// engine is the state of one replay. All its methods but prepare run on the
// tracer thread.
type engine struct {
	c      *format.Checkpoint
	sched  format.Schedule   // the order threads run their code between calls in (threads.go)
	xsave  *proc.XSaveLayout // the recording CPU's XSAVE layout (nil: not in the file)
	end    format.EndState   // what the replay must reach: c.End, or an interval start (Options.Until)
	rseqs  []format.Rseq     // left out of the digests (format.DigestPage)
	peeked map[uint64]bool   // lazy pages the end comparison read without serving (peek)
	until  int               // position in c.Intervals where the replay ends (len when at c.End)
	pages  format.PageSource
	opts   Options
	k      int           // position of the start interval in c.Intervals
	first  int           // position of the oldest interval a replay could start at
	thread format.Thread // the thread the checkpoint ends in, at the start
	// stopSearch compares in the process where stopThread, which has no
	// call left, is to stop (threads.go, stopInProcess).
	stopSearch *endInProcess
	stopThread *rthread
	// The threads replay runs (threads.go): by recorded tid, the current
	// one, the others than the end thread, those still to run to their
	// first entry, those a call in the window starts (until it does), and
	// how many ended in the window.
	threads map[int]*rthread
	cur     *rthread
	others  []format.Thread
	startQ  []*rthread
	born    map[int]bool
	ended   int
	lastAt  map[int]int // by tid, the position of its last call in log
	log     []format.Syscall
	next    int                  // position in log of the next syscall to execute
	sigs    []format.SignalEvent // signals to deliver to the current thread, in order (deliver)
	nextSig int                  // position in sigs of the next one
	// sigQ: with several threads, the signals of each (by recorded id),
	// placed after its own calls (threadSignals); switchTo makes a
	// thread's the current sigs.
	sigQ      map[int][]format.SignalEvent
	sigAtExit *format.SignalEvent // delivered at the exit of the call it interrupted
	sigSearch *format.SignalEvent // delivered in user code, its point searched for (startSearch)
	// passedOn counts the times the end differed only in memory with a
	// thread held at its stop, which went on to its next pass
	// (passOnFromEnd); passedOnWhy is how it differed the first time.
	passedOn    int
	passedOnWhy string
	// heldAtFirstPass is the thread a debugger's replay left held at the
	// first pass over its stop where only memory differed at the end.
	heldAtFirstPass int
	// again: a call skipped at its entry, to be run again once the memory
	// the kernel reads for it is served (skipToServe).
	again   *skippedCall
	base    uint64
	timeout time.Duration
	// hwbp: the debug registers work here (HardwareBreakpoints); else the
	// end search sets an int3.
	hwbp bool
	noHW string // why not

	stub   *stub
	mem    *proc.Mem
	out    *outputs
	guards guardSet
	lazy   map[uint64]lazyPage // pages not served yet (Options.Lazy)
	served map[uint64]bool     // pages served so far
	// servedMapped: per file mmap record (seq), the addresses in its Pages
	// of the pages served or peeked (lazyPage.seq).
	servedMapped map[uint64]map[uint64]bool
	brkEnd       uint64 // page-aligned end of the program's heap as replay built it
	pend         *pending
	bp           breakpoint
	int3s        int3Table
	xtests       map[uint64]bool // the xtests patched (xtest.go)
	dbg          *debugState     // nil unless a debugger drives the engine (Session)
	// writtenFirst counts the pages written before the replay started
	// (Options.WrittenFirst).
	writtenFirst int

	// realFault: the end is a synchronous fault the program raises itself.
	realFault bool
	stopReq   *atomic.Int32 // a deadline or cancel asks Run to stop (stopDeadline, stopCanceled)
	// emu: the stub was resumed with PTRACE_SYSEMU, so the syscall stop is
	// an entry the kernel will skip, with no exit stop: the engine completes
	// the call at its entry. Run uses it when the next record is emulated.
	emu bool
	// skipExit: the last stop was a SYSEMU entry; resumed with anything but
	// PTRACE_SYSEMU, the kernel still reports that skipped call's exit.
	skipExit bool
	// inproc: the calls completed in the process (inprocess.go); nil when
	// the replay runs without.
	inproc *inProcess
	// restartAs: a signal handler returns to restart_syscall, which then
	// finishes this call (format.SignalEvent.Rewound).
	restartAs int
	// untilState is the content of every page at the interval start a
	// replay with Options.Until ends at, built when a divergence there
	// first asks for it (recordedEndPage).
	untilState map[uint64]format.Hash
	// endPages keeps what recordedEndPage found for each address (nil
	// when the checkpoint does not hold it): an end search in a loop asks
	// for the same page at every pass where only memory differs, and
	// reading it decompressed a page block each time.
	endPages map[uint64][]byte
	// deadLogged: the end pages a replay was told differ only in the
	// other threads' dead stacks (deadStacksOnly).
	deadLogged map[uint64]bool
}

// prepare checks that c can be replayed here and plans the run.
func prepare(c *format.Checkpoint, pages format.PageSource, opts Options) (*engine, error) {
	if c.Header.Arch != "x86_64" {
		return nil, fmt.Errorf("checkpoint was recorded on %q: replay runs only x86_64 checkpoints", c.Header.Arch)
	}
	if err := CheckCPU(c.Header.CPUFlags); err != nil && !opts.AnyCPU {
		return nil, err
	}
	if len(c.Intervals) == 0 {
		return nil, fmt.Errorf("checkpoint has no interval")
	}
	// A replay can neither start in nor run through an interval that is not
	// replayable: start after the last such one.
	last := -1
	for i, iv := range c.Intervals {
		if !iv.Replayable {
			last = i
		}
	}
	k := -1
	if opts.From < 0 {
		if last == len(c.Intervals)-1 {
			iv := c.Intervals[last]
			return nil, fmt.Errorf("checkpoint has no replayable interval (the last one, %d: %s)", iv.Index, iv.Reason)
		}
		k = last + 1
	} else {
		if opts.Until > 0 && opts.Until <= opts.From {
			// A replay from an earlier stored start would have run and
			// verified the state at --until, which is not what was asked.
			return nil, fmt.Errorf("a replay from interval %d cannot end at interval %d, which begins before it", opts.From, opts.Until)
		}
		for i, iv := range c.Intervals {
			if iv.Index == opts.From {
				k = i
			}
		}
		if k < 0 {
			return nil, fmt.Errorf("checkpoint has no interval %d", opts.From)
		}
		if k <= last {
			iv := c.Intervals[last]
			return nil, fmt.Errorf("a replay from interval %d would run through interval %d, which is not replayable: %s", opts.From, iv.Index, iv.Reason)
		}
	}
	// A replay begins where the checkpoint stores a start (a minimized one
	// stores the first only): at k, else at the nearest earlier one, running
	// through k's start; with no interval asked for, at the first stored.
	s := k
	for s > last && c.Intervals[s].StartOmitted {
		s--
	}
	if s <= last && opts.From < 0 {
		for s = k; s < len(c.Intervals) && c.Intervals[s].StartOmitted; s++ {
		}
	}
	if s <= last || s == len(c.Intervals) {
		return nil, fmt.Errorf("checkpoint stores no interval start a replay from interval %d could begin at", c.Intervals[k].Index)
	}
	k = s
	// first: where a replay from the oldest possible start begins, the
	// start the recorder's trial replay ran from (zeroWhenAbsent).
	first := last + 1
	for first < k && c.Intervals[first].StartOmitted {
		first++
	}
	for _, iv := range c.Intervals[k:] {
		if _, err := iv.Thread(c.End.Tid); err != nil {
			return nil, fmt.Errorf("%w, the thread the checkpoint ends in", err)
		}
	}
	iv := c.Intervals[k]
	thread, _ := iv.Thread(c.End.Tid)
	end := c.End
	until := len(c.Intervals)
	rseqs := c.RseqAreas() // it scans the whole log: once
	if opts.Until > 0 {
		var err error
		if until, end, err = boundaryEnd(c, k, opts.Until, pages, rseqs); err != nil {
			return nil, err
		}
	}
	switch end.Kind {
	case format.EndSignal, format.EndExit, format.EndRequest:
	default:
		return nil, fmt.Errorf("checkpoint end state has unknown kind %q", end.Kind)
	}
	sched := c.Header.Schedule
	if opts.Schedule != nil {
		sched = *opts.Schedule
	}
	if sched > format.ScheduleLate {
		return nil, fmt.Errorf("checkpoint asks for a thread %v, which this build does not know", sched)
	}
	e := &engine{c: c, end: end, until: until, pages: pages, opts: opts, k: k, first: first, thread: thread, brkEnd: heapEnd(c, k), rseqs: rseqs, stopReq: new(atomic.Int32), sched: sched, xsave: xsaveLayout(c.Header.XSave)}
	if e.hwbp, e.noHW = HardwareBreakpoints(); !e.hwbp && opts.Verbose {
		e.logf("the debug registers do not work on this machine (%s): breakpoints are int3, watchpoints single steps", e.noHW)
	}
	// The signals delivered from the first call of the start interval on
	// (one delivered before it belongs to the interval before: the
	// recorder marks an interval where one arrives before its first call
	// as not replayable).
	for _, s := range c.Signals {
		if s.Handler == nil {
			// Recorded without what its delivery did (before version
			// 3.1, or not seen reaching a handler): its interval is not
			// replayable.
			if s.Seq+1 >= iv.FirstSeq {
				return nil, fmt.Errorf("signal %s delivered to thread %d after syscall #%d: the checkpoint does not say how to replay its delivery",
					signalName(s.Signo), s.Tid, s.Seq)
			}
			continue
		}
		if s.Interval < iv.Index || s.Interval > c.Intervals[until-1].Index {
			continue
		}
		e.sigs = append(e.sigs, s) // whose threads planThreads checks
	}
	// The log is sorted by sequence number (format.checkModel): the
	// window's calls are one stretch of it, which the replay reads but
	// never changes, so it is used in place (a trial piece of a busy
	// server's window used to copy half a million records).
	lo := sort.Search(len(c.Syscalls), func(i int) bool { return c.Syscalls[i].Seq >= iv.FirstSeq })
	hi := sort.Search(len(c.Syscalls), func(i int) bool { return c.Syscalls[i].Seq > end.LastSeq })
	if lo < hi {
		e.log = c.Syscalls[lo:hi:hi]
	}
	for i, s := range e.log {
		if s.Seq != iv.FirstSeq+uint64(i) {
			return nil, fmt.Errorf("syscall log has a gap: #%d follows #%d", s.Seq, iv.FirstSeq+uint64(i)-1)
		}
		d, _ := syscalls.Lookup(s.Nr)
		if ok, why := syscalls.Check(d, s.Args); !ok {
			if d == nil {
				why = syscalls.Name(s.Nr) + ": " + why
			}
			return nil, fmt.Errorf("syscall #%d cannot be replayed: %s", s.Seq, why)
		}
	}
	if err := e.planThreads(iv); err != nil {
		return nil, err
	}
	if len(end.Siginfo) >= 16 && end.Kind == format.EndSignal {
		code := int32(le32(end.Siginfo[8:]))
		switch end.Signo {
		case int(unix.SIGSEGV), int(unix.SIGBUS), int(unix.SIGILL), int(unix.SIGFPE), int(unix.SIGTRAP):
			e.realFault = code > 0
		}
	}
	base, err := pickStubBase(occupied(c, e.log))
	if err != nil {
		return nil, err
	}
	e.base = base
	e.timeout = opts.Timeout
	if e.timeout == 0 {
		e.timeout = DefaultTimeout(c, k, e.hwbp)
	}
	return e, nil
}

// DefaultTimeout is how long a replay of c from the interval at position k
// may take when Options.Timeout is 0: 20 times the recorded time from that
// interval's start, at least 30 s, and twice that where the debug registers
// do not work (hw false: each pass of a breakpoint search is then two stops
// with an int3).
func DefaultTimeout(c *format.Checkpoint, k int, hw bool) time.Duration {
	window := c.Intervals[len(c.Intervals)-1].End.Sub(c.Intervals[k].Start)
	d := max(30*time.Second, 20*window)
	if !hw {
		d *= 2
	}
	return d
}

// boundaryEnd describes the start of the interval of Index until as an end
// state for a replay starting at position k: its position, and the thread's
// state there, with the digests a dump request would carry (the stack page
// under rsp, the pages the interval before it wrote): the ones the file
// stores for that boundary, or for files before version 3.0, computed from
// the pages the checkpoint gives that interval's start.
func boundaryEnd(c *format.Checkpoint, k, until int, pages format.PageSource, rseqs []format.Rseq) (int, format.EndState, error) {
	u := -1
	for i, iv := range c.Intervals {
		if iv.Index == until {
			u = i
		}
	}
	if u <= k {
		return 0, format.EndState{}, fmt.Errorf("a replay from interval %d cannot end at interval %d", c.Intervals[k].Index, until)
	}
	iv := c.Intervals[u]
	t, err := iv.Thread(c.End.Tid)
	if err != nil {
		return 0, format.EndState{}, err
	}
	end := format.EndState{Kind: format.EndRequest, Tid: t.Tid, Regs: t.Regs, XState: t.XState, LastSeq: iv.FirstSeq - 1, Rseq: t.Rseq, Digests: iv.Digests}
	if len(iv.Digests) == 0 && !iv.StartOmitted {
		var err error
		if end.Digests, err = c.BoundaryDigests(u, pages, rseqs); err != nil {
			return 0, format.EndState{}, err
		}
	}
	return u, end, nil
}

// xsaveLayout is the recording CPU's XSAVE layout the header gives, nil
// for a file without one (older than 7.2). A component number the layout
// cannot hold is left out (a corrupt file: its images keep AVX at most).
func xsaveLayout(cs []format.XComponent) *proc.XSaveLayout {
	if len(cs) == 0 {
		return nil
	}
	var l proc.XSaveLayout
	for _, c := range cs {
		if int(c.Index) < len(l) {
			l[c.Index].Offset, l[c.Index].Size = c.Offset, c.Size
		}
	}
	return &l
}

// heapEnd is where the program's brk area ends at the start of interval k:
// the end of its last [heap] mapping, or the start of the first one a later
// interval shows (the break had not moved yet), or 0 when unknown until the
// first brk. A process that got its heap from its parent through fork (a
// daemon, a server's worker, tmux) has two [heap] mappings once its break
// moves: the kernel does not merge the growth with the inherited part. The
// end of the first one was taken for the break, and the next brk that grew
// the heap failed in replay with EEXIST.
func heapEnd(c *format.Checkpoint, k int) uint64 {
	var end uint64
	for _, m := range c.Intervals[k].Maps {
		if m.Path == "[heap]" {
			end = max(end, m.End)
		}
	}
	if end != 0 {
		return end
	}
	for _, iv := range c.Intervals[k+1:] {
		var start uint64
		for _, m := range iv.Maps {
			if m.Path == "[heap]" && (start == 0 || m.Start < start) {
				start = m.Start
			}
		}
		if start != 0 {
			return start
		}
	}
	return 0
}

func (e *engine) logf(format string, args ...any) {
	if e.opts.Verbose && e.opts.Log != nil {
		fmt.Fprintf(e.opts.Log, "tpreplay: "+format+"\n", args...)
	}
}

// logCall logs a replayed call when Verbose is set: at its stop, or after
// the process completed it itself (inprocess.go), which -v does not prevent:
// a replay runs the same way with and without it.
func (e *engine) logCall(rec *format.Syscall) {
	switch {
	case !e.opts.Verbose:
	case e.multi():
		e.logf("#%d [%d] %s", rec.Seq, rec.Tid, syscalls.Format(*rec))
	default:
		e.logf("#%d %s", rec.Seq, syscalls.Format(*rec))
	}
}

// lastSeq is the seq of the last syscall executed so far.
func (e *engine) lastSeq() uint64 {
	if e.next > 0 {
		return e.log[e.next-1].Seq
	}
	return e.c.Intervals[e.k].FirstSeq - 1
}

func (e *engine) diverge(rip uint64, seq uint64, reason, expected, actual string) *Divergence {
	return &Divergence{Tid: e.cur.rec.Tid, Threads: len(e.threads) + e.ended, Seq: seq, Rip: rip, Reason: reason, Expected: expected, Actual: actual}
}

// loop drives the stub from its first instruction to the end state.
func (e *engine) loop() (*Result, error) {
	if len(e.log) == 0 && e.sigSearch == nil {
		regs, err := proc.GetRegs(e.stub.tid)
		if err != nil {
			return nil, err
		}
		if res, err := e.atLogEnd(regs); res != nil || err != nil {
			return res, err
		}
	}
	req := unix.PTRACE_SYSCALL
	for {
		ev, err := e.advance(req, nil)
		if err != nil {
			return nil, err
		}
		if ev.res != nil {
			return ev.res, nil
		}
		req = ev.next
	}
}

// event is what one advance of the stub came to.
type event struct {
	kind eventKind
	regs proc.Regs // at the stop, after the engine handled it
	nr   int       // syscall number of a syscall stop
	res  *Result   // the recorded end was reached
	next int       // the ptrace request to resume with
	// trapped: a debugger's trap the intercept claimed; info is its siginfo.
	info []byte
	// delivered: a signal that interrupted a call was delivered at its
	// exit; regs are at the handler.
	delivered bool
	// switched: the thread that stopped at an entry was parked there and
	// another one became current (threads.go); regs are the parked one's.
	switched bool
	// standing: under a debugger, the current thread stands at its stop,
	// where the next resume holds it (holdAtStop).
	standing bool
	// counted: under a debugger, the end search's code stopped at the pass
	// asked for (countStop); regs stand at its address.
	counted bool
}

type eventKind int

const (
	evOther  eventKind = iota
	evEntry            // a syscall entry the engine handled
	evExit             // a syscall exit the engine handled: one more record done
	evSignal           // a signal the engine handled (the end breakpoint, or the end)
	evTrap             // a SIGTRAP claimed by the intercept
)

// trapIntercept lets a debugger claim a signal stop (its breakpoints, steps,
// watchpoints, an interrupt) before the engine's own signal handling sees it;
// it returns true when the stop is the debugger's.
type trapIntercept func(regs proc.Regs, sig int, info []byte) bool

// advance resumes the stub with req, waits for its next stop and lets the
// engine handle it: syscall entries and exits are checked against the log and
// emulated, signals go through onSignal. Run and Session share it.
func (e *engine) advance(req int, intercept trapIntercept) (event, error) {
	pid := e.stub.tid
	asked := req
	ev := event{next: unix.PTRACE_SYSCALL}
	// An emulated call costs one stop instead of two when the stub runs
	// under PTRACE_SYSEMU: the kernel stops at the entry and skips the call
	// whatever the tracer does, so it is used only when the next record is
	// one replay emulates (a diverging call is reported at that entry all
	// the same). A debugger sees entries and exits, so Session does not.
	e.emu = false
	skipExit := e.skipExit
	e.skipExit = false
	plain := req == unix.PTRACE_SYSCALL && intercept == nil && e.dbg == nil && e.pend == nil && e.sigAtExit == nil
	// The calls from e.next on that the process can complete itself
	// (inprocess.go): the stop to come is then the call after them.
	at := e.next
	if plain && e.inproc != nil && e.sigSearch == nil && e.again == nil && !e.bp.active && e.restartAs == 0 &&
		e.next < len(e.log) && (!e.multi() || len(e.startQ) == 0) {
		at += e.inproc.arm(e)
	}
	if plain && at < len(e.log) &&
		e.log[at].Tid == e.cur.rec.Tid && (!e.multi() || len(e.startQ) == 0) && !e.lastOfThread(at) && !e.startsThread(&e.log[at]) {
		// With several threads, only for a call of the thread that runs
		// (another one's entry parks it); not for a thread's last call of
		// the window (lastOfThread), nor for a call that starts a thread,
		// which is made at its exit stop.
		// Not when a signal follows the call: delivering it may serve lazy
		// pages, which takes the exit stop.
		sigAfter := e.nextSig < len(e.sigs) && e.sigs[e.nextSig].Seq == e.log[at].Seq
		if d, ok := syscalls.Lookup(e.log[at].Nr); ok && d.Kind == syscalls.Emulate && !sigAfter {
			req, e.emu = unix.PTRACE_SYSEMU, true
		}
	}
	if err := proc.Resume(req, pid, 0); err != nil {
		return ev, fmt.Errorf("resume replay: %w", err)
	}
	st, err := e.wait()
	if err != nil {
		return ev, err
	}
	if skipExit && req != unix.PTRACE_SYSEMU && st.SyscallStop() {
		// The exit of a call completed at its SYSEMU entry: nothing to do.
		if err := proc.Resume(req, pid, 0); err != nil {
			return ev, fmt.Errorf("resume replay: %w", err)
		}
		if st, err = e.wait(); err != nil {
			return ev, err
		}
	}
	if e.inproc != nil && at > e.next {
		n := e.inproc.sync()
		for i := e.next; i < e.next+n; i++ {
			e.logCall(&e.log[i])
		}
		e.next += n
	}
	if st.Exited() {
		// With several threads, killAndReap reaps the rest.
		e.stub.reaped = !e.multi()
		reason := fmt.Sprintf("the replayed process ended: %v", st)
		if st.Status.Signaled() && st.Status.Signal() == unix.SIGSYS {
			reason = "the replayed process was killed by the seccomp filter: it executed a syscall replay must never execute for real"
		}
		return ev, e.diverge(0, e.lastSeq(), reason, "", "")
	}
	regs, err := proc.GetRegs(pid)
	if err != nil {
		return ev, err
	}
	ev.regs = regs
	switch {
	case st.SyscallStop() && e.emu:
		// Under SYSEMU every syscall stop is an entry.
		nr := int(regs.OrigRax)
		ev.kind, ev.nr = evEntry, nr
		ev.res, err = e.onEntry(regs, nr, [6]uint64{regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9})
		if err == nil && e.sigAtExit != nil {
			return e.interrupted(ev)
		}
		return ev, err
	case st.SyscallStop():
		info, err := proc.GetSyscallInfo(pid)
		if err != nil {
			return ev, fmt.Errorf("read syscall stop: %w", err)
		}
		switch {
		case info.Op == proc.SyscallEntry:
			if e.dbg != nil {
				e.dbg.sysAt = regs.Rip - 2
			}
			if ev.switched, ev.res, err = e.yieldAt(int(info.Nr)); ev.switched {
				// Parked: another thread went on (threads.go).
				return ev, err
			}
			ev.kind, ev.nr = evEntry, int(info.Nr)
			ev.res, err = e.onEntry(regs, int(info.Nr), info.Args)
			if err == nil && e.sigAtExit != nil {
				return e.interrupted(ev)
			}
		case info.Op == proc.SyscallExit && e.again != nil:
			ev.kind = evOther // the exit of a call skipped to serve its memory (skipToServe)
			err = e.runAgain(regs)
		case info.Op == proc.SyscallExit:
			ev.kind = evExit
			if e.pend != nil {
				ev.nr = e.pend.rec.Nr
			}
			ev.res, err = e.onExit(regs)
		default:
			err = fmt.Errorf("syscall stop of unknown kind %d", info.Op)
		}
		return ev, err
	case st.Signal() != 0:
		sig := st.Signal()
		if sig == int(unix.SIGILL) {
			// An xtest this CPU lacks: patched, it runs again, as the
			// same request asked (xtest.go).
			if patched, err := e.patchXTest(regs.Rip); err != nil || patched {
				if err != nil {
					return ev, err
				}
				return e.advance(asked, intercept)
			}
		}
		if s := e.bp.inproc; sig == int(unix.SIGTRAP) && e.dbg != nil && s != nil && regs.Rip == s.trap+1 && s.countStopDue() {
			ev.kind, ev.counted = evOther, true
			ev.regs, err = e.standAtPass(s, regs)
			return ev, err
		}
		if sig == int(unix.SIGTRAP) {
			if ev, hit, err := e.stopTrap(ev, regs, intercept != nil); hit || err != nil {
				return ev, err
			}
		}
		if intercept != nil {
			info, err := proc.GetSiginfo(pid)
			if err != nil {
				return ev, fmt.Errorf("read siginfo: %w", err)
			}
			if intercept(regs, sig, info) {
				ev.kind, ev.info = evTrap, info
				return ev, nil
			}
		}
		ev.kind = evSignal
		ev.res, ev.next, err = e.onSignal(regs, sig)
		return ev, err
	}
	// Group-stop or event stops: nothing to do, resume.
	return ev, nil
}

// wait waits for the current thread's next stop. With several threads it
// takes the next report of any of them: the others are stopped, so theirs
// can only be their end, which means the process is ending (an exit_group,
// a fatal signal), and waiting for the current thread alone would hang
// when that is the first thread, whose end is not reported before the
// others are reaped.
func (e *engine) wait() (proc.Stop, error) {
	if !e.multi() {
		return proc.Wait(e.stub.tid)
	}
	for {
		st, err := proc.WaitOwn()
		if err != nil || st.Tid == e.stub.tid || st.Exited() {
			return st, err
		}
		// Another thread's stop, which it stays in: nothing to do.
	}
}

// pending is the syscall between its entry and exit stops.
type pending struct {
	rec  *format.Syscall
	desc *syscalls.Desc
	// real: the kernel executes the call; want is the result it must give.
	real bool
	want int64
	// args holds the argument registers to put back at the exit when the
	// replayer rewrote the call.
	rewrote bool
	args    [6]uint64
	// after runs at the exit, once the result is checked.
	after func() error
}

func (e *engine) describe(nr int, args [6]uint64) string {
	n := 6
	if d, ok := syscalls.Lookup(nr); ok {
		n = d.NArgs
	}
	s := syscalls.Name(nr) + "("
	for i := 0; i < n; i++ {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%#x", args[i])
	}
	return s + ")"
}

func (e *engine) onEntry(regs proc.Regs, nr int, args [6]uint64) (*Result, error) {
	if ok, err := e.interruptedEntry(regs, nr); ok || err != nil {
		return nil, err
	}
	if ev := e.sigSearch; ev != nil {
		actual := e.describe(nr, args)
		if e.bp.hits > 0 {
			actual += fmt.Sprintf(" (its rip was reached %d times; last difference: %s)", e.bp.hits, e.bp.lastWhy)
		}
		return nil, e.diverge(regs.Rip, e.lastSeq(), "made a syscall before the point where the recording delivered "+signalName(ev.Signo),
			fmt.Sprintf("%s at rip %#x", signalName(ev.Signo), ev.Regs.Rip), actual)
	}
	if e.next >= len(e.log) {
		end := e.end
		if end.Kind == format.EndExit && (nr == unix.SYS_EXIT_GROUP || nr == unix.SYS_EXIT) &&
			int(args[0]&0xff) == end.ExitCode&0xff {
			return e.verified(regs.Rip), nil
		}
		if end.Kind == format.EndExit {
			return nil, e.diverge(regs.Rip, e.lastSeq(), "the program did not exit after the last recorded syscall",
				fmt.Sprintf("exit_group(%d)", end.ExitCode), e.describe(nr, args))
		}
		inCall := ""
		if !e.realFault {
			// The recording may have ended inside this very call (a dump
			// request or a kill while it blocked): its end state is then
			// normalized to "about to execute the syscall", or about to
			// execute restart_syscall for a call the kernel resumes that
			// way (nanosleep, clock_nanosleep, poll: -ERESTART_RESTARTBLOCK).
			at := regs
			at.Rip -= 2
			at.Rax = uint64(nr)
			if e.end.Regs.Rax == unix.SYS_RESTART_SYSCALL {
				at.Rax = unix.SYS_RESTART_SYSCALL
			}
			if inCall = e.matchEndInCall(at, nr, args); inCall == "" {
				r := e.verified(at.Rip)
				r.InCall = syscalls.Name(nr)
				return r, nil
			}
			if len(regsDiff(e.end.Regs, at)) == 0 {
				// Parked at this entry, compared again once a thread held
				// at its stop went on to its next pass.
				if ok, res, err := e.passOnFromEnd(inCall, threadParked); ok || err != nil {
					return res, err
				}
			}
		}
		actual := e.describe(nr, args)
		if inCall != "" && regs.Rip-2 == e.end.Regs.Rip {
			actual += fmt.Sprintf(" (as the call the recording ended in: %s)", inCall)
		}
		if e.bp.hits > 0 {
			actual += fmt.Sprintf(" (the recorded end rip was reached %d times; last difference: %s)", e.bp.hits, e.bp.lastWhy)
			if e.bp.regsMatched > 0 {
				actual += fmt.Sprintf("; the registers matched %d times, the first time memory differed: %s", e.bp.regsMatched, e.bp.memWhy)
			}
		}
		if e.passedOn > 0 {
			actual += fmt.Sprintf(" (the end thread stood at the recorded end %d times, a thread held at its stop going on to a later pass each time; the first time memory differed: %s)", e.passedOn, e.passedOnWhy)
		}
		if e.heldAtFirstPass != 0 {
			actual += fmt.Sprintf(" (under a debugger thread %d stays at the first pass over its stop with the recorded registers; tpreplay without --gdb takes it on to later passes, where memory may match too)", e.heldAtFirstPass)
		}
		return nil, e.diverge(regs.Rip, e.lastSeq(), "made a syscall after the last recorded one", "no syscall", actual)
	}
	rec := &e.log[e.next]
	d, ok := syscalls.Lookup(rec.Nr)
	n := 6
	if ok {
		n = d.NArgs
	}
	if nr == unix.SYS_RESTART_SYSCALL && e.restartAs == rec.Nr && ok && d.Kind == syscalls.Emulate {
		// The restart of the call a signal came to (Rewound), after the
		// handler returned: the log holds it under the call's own
		// number, and it is emulated.
		nr = rec.Nr
		e.restartAs = 0
	}
	if nr != rec.Nr && e.lockFutex(rec) {
		// The thread waited for a lock, or woke a waiter of one, in the
		// recording and does not here: skip that call and go on with
		// the next record.
		e.logf("#%d [%d] %s: not made, the lock was not contended in the replay", rec.Seq, rec.Tid, e.describe(rec.Nr, rec.Args))
		e.next++
		if e.emu {
			// The thread was resumed under PTRACE_SYSEMU for that futex
			// call, and the kernel skips the call it made instead
			// whatever happens next: were it parked here for another
			// thread, or compared with a record that runs for real, it
			// would go on with -ENOSYS as its result. It makes the call
			// again, resumed as the record now next asks (the skipped
			// call's exit stop comes first: skipExit).
			e.skipExit = true
			return nil, e.callAgain(regs, nr)
		}
		if yielded, res, err := e.yieldAt(nr); yielded {
			return res, err
		}
		return e.onEntry(regs, nr, args)
	}
	if nr != rec.Nr {
		return nil, e.diverge(regs.Rip, rec.Seq, "different syscall", e.describe(rec.Nr, rec.Args), e.describe(nr, args))
	}
	for i := 0; i < n; i++ {
		if args[i] != rec.Args[i] {
			return nil, e.diverge(regs.Rip, rec.Seq, fmt.Sprintf("argument %d of %s differs", i+1, syscalls.Name(nr)),
				e.describe(rec.Nr, rec.Args), e.describe(nr, args))
		}
	}
	if rec.Rip != 0 && regs.Rip != rec.Rip && nr != unix.SYS_RT_SIGRETURN {
		return nil, e.diverge(regs.Rip, rec.Seq, fmt.Sprintf("%s called from elsewhere", syscalls.Name(nr)),
			fmt.Sprintf("rip %#x", rec.Rip), fmt.Sprintf("rip %#x", regs.Rip))
	}
	if rec.Nr == unix.SYS_RT_SIGRETURN {
		if again, err := e.sigreturnEntry(regs); again || err != nil {
			return nil, err
		}
	}
	if d != nil && d.Kind == syscalls.Process {
		// A call the kernel executes reads its memory argument itself.
		if a, n := processMemory(rec.Nr, rec.Args); a != 0 && e.lazyRange(a, n) {
			return nil, e.skipToServe(regs, rec.Nr, func() error { return e.touch(a, n) })
		}
	}
	e.logCall(rec)
	if err := e.out.capture(e.mem, rec); err != nil {
		return nil, err
	}
	// On a value: the common case completes the call right here (SYSEMU)
	// and a heap copy is made only for a call that stays pending.
	pv := pending{rec: rec, desc: d}
	p := &pv
	area, rseq := rseqRegistration(rec)
	switch d.Kind {
	case syscalls.Emulate:
		if rseq {
			p.after = func() error { return e.rseqRegistered(area) }
		}
	case syscalls.Process:
		p.real, p.want = true, rec.Ret
		if a, n := processMemory(rec.Nr, rec.Args); a != 0 {
			if err := e.touch(a, n); err != nil {
				return nil, err
			}
		}
	case syscalls.Memory:
		if err := e.memoryEntry(p, &regs); err != nil {
			return nil, err
		}
	case syscalls.Exit:
		// exit_group never completes, so it cannot be in the log of completed calls.
		return nil, fmt.Errorf("syscall #%d: %s logged as completed", rec.Seq, d.Name)
	default:
		return nil, fmt.Errorf("syscall #%d: %s cannot be replayed", rec.Seq, d.Name)
	}
	if e.emu {
		if p.real || p.rewrote {
			return nil, fmt.Errorf("syscall #%d: %s stopped under SYSEMU but must run for real", rec.Seq, d.Name)
		}
		if !e.lazyIn(rec.Out) && (!rseq || !e.lazyRange(area, 8)) {
			// PTRACE_SYSEMU: the kernel skips this call and never stops at
			// its exit; complete it now.
			e.skipExit = true
			return e.complete(p, regs)
		}
		// Serving a lazy page injects an mprotect, which cannot start from
		// a syscall-entry stop: resumed with PTRACE_SYSCALL, the skipped
		// call stops at its exit, where the usual path completes it.
	}
	if !p.real {
		regs.OrigRax = ^uint64(0) // skip: the kernel returns -ENOSYS, replaced at the exit
	}
	if !p.real || p.rewrote {
		if err := proc.SetRegs(e.stub.tid, regs); err != nil {
			return nil, fmt.Errorf("syscall #%d: set registers: %w", rec.Seq, err)
		}
	}
	e.pend = new(pending)
	*e.pend = pv
	return nil, nil
}

func (e *engine) onExit(regs proc.Regs) (*Result, error) {
	p := e.pend
	if p == nil {
		return nil, fmt.Errorf("syscall exit without an entry at rip %#x", regs.Rip)
	}
	e.pend = nil
	rec := p.rec
	if p.real {
		got := int64(regs.Rax)
		if got != p.want {
			return nil, e.diverge(regs.Rip, rec.Seq, fmt.Sprintf("%s executed for real gave another result", syscalls.Name(rec.Nr)),
				describeRet(p.want), describeRet(got))
		}
	}
	return e.complete(p, regs)
}

// complete gives the program the recorded result and outputs of p's call,
// at its exit stop (or at its entry under PTRACE_SYSEMU), and moves on to
// the next record.
func (e *engine) complete(p *pending, regs proc.Regs) (*Result, error) {
	rec := p.rec
	if err := e.exitsFor(rec); err != nil {
		return nil, err
	}
	if rec.Nr != unix.SYS_RT_SIGRETURN {
		regs.Rax = uint64(rec.Ret)
		var err error
		if p.rewrote {
			regs.Rdi, regs.Rsi, regs.Rdx, regs.R10, regs.R8, regs.R9 = p.args[0], p.args[1], p.args[2], p.args[3], p.args[4], p.args[5]
			regs.OrigRax = uint64(rec.Nr)
			err = proc.SetRegs(e.stub.tid, regs)
		} else {
			err = proc.SetRax(e.stub.tid, regs.Rax)
		}
		if err != nil {
			return nil, fmt.Errorf("syscall #%d: set result: %w", rec.Seq, err)
		}
	}
	for _, o := range rec.Out {
		if err := e.touch(o.Addr, len(o.Data)); err != nil {
			return nil, err
		}
		if err := e.mem.WriteAt(o.Data, o.Addr); err != nil {
			return nil, e.diverge(regs.Rip, rec.Seq, fmt.Sprintf("output buffer of %s is not mapped", syscalls.Name(rec.Nr)),
				fmt.Sprintf("%d bytes at %#x", len(o.Data), o.Addr), err.Error())
		}
	}
	if p.after != nil {
		if err := p.after(); err != nil {
			return nil, fmt.Errorf("syscall #%d: %w", rec.Seq, err)
		}
	}
	e.next++
	var err error
	if regs, err = e.deliverAfter(rec.Seq, regs); err != nil {
		return nil, err
	}
	regs, searching, err := e.searchSignals(regs)
	if err != nil || searching {
		return nil, err
	}
	if goOn, res, err := e.afterCall(regs); !goOn || err != nil {
		return res, err
	}
	if e.next == len(e.log) {
		if e.cur != e.endThread() {
			// It runs on to its next entry, where the end thread takes over.
			return nil, nil
		}
		return e.atLogEnd(regs)
	}
	return nil, nil
}

// deliverAfter delivers the signals recorded right after call seq
// returned, up to one that interrupted the next call (interruptedEntry) or
// one delivered in user code (searchSignals).
func (e *engine) deliverAfter(seq uint64, regs proc.Regs) (proc.Regs, error) {
	for e.nextSig < len(e.sigs) && e.sigs[e.nextSig].Seq == seq && e.sigs[e.nextSig].AtSyscallExit() && !e.sigs[e.nextSig].Interrupted() {
		var err error
		if regs, err = e.deliver(&e.sigs[e.nextSig], regs); err != nil {
			return regs, err
		}
		e.nextSig++
	}
	return regs, nil
}

// interruptedEntry handles the entry of a call that the recording saw
// interrupted by a signal: the call returned a restart code the log does
// not hold, and the signal was delivered. The call is skipped, and its exit
// stop delivers that signal (and those that followed it at once):
// delivering may serve lazy pages, which cannot be done from an entry stop.
// It reports whether the entry was such a call.
func (e *engine) interruptedEntry(regs proc.Regs, nr int) (bool, error) {
	if e.nextSig >= len(e.sigs) {
		return false, nil
	}
	ev := &e.sigs[e.nextSig]
	// A call a boundary interrupted in the recording went on as
	// restart_syscall, and a signal that interrupted that is recorded on
	// it: a replay that ran through the boundary makes the call itself, at
	// the same instruction.
	restarted := ev.Regs.OrigRax == unix.SYS_RESTART_SYSCALL && regs.Rip == ev.Regs.Rip
	if !ev.Interrupted() || nr != int(ev.Regs.OrigRax) && !restarted || ev.Seq != e.ownLastSeq() {
		return false, nil
	}
	if !e.emu {
		regs.OrigRax = ^uint64(0)
		if err := proc.SetRegs(e.stub.tid, regs); err != nil {
			return true, fmt.Errorf("skip the call %s interrupted: %w", signalName(ev.Signo), err)
		}
	}
	e.sigAtExit = ev
	return true, nil
}

// interrupted takes the program from the entry of a call a signal
// interrupted (interruptedEntry) through its exit, where the signal is
// delivered: no record, and for a debugger no syscall, only the delivery.
func (e *engine) interrupted(ev event) (event, error) {
	pid := e.stub.tid
	if err := proc.Resume(unix.PTRACE_SYSCALL, pid, 0); err != nil {
		return ev, fmt.Errorf("resume replay: %w", err)
	}
	st, err := proc.Wait(pid)
	if err != nil {
		return ev, err
	}
	if !st.SyscallStop() {
		return ev, fmt.Errorf("the call %s interrupted did not stop at its exit: %v", signalName(e.sigAtExit.Signo), st)
	}
	regs, err := proc.GetRegs(pid)
	if err != nil {
		return ev, err
	}
	if err := e.interruptedExit(regs); err != nil {
		return ev, err
	}
	ev.kind, ev.delivered = evOther, true
	ev.regs, err = proc.GetRegs(pid)
	return ev, err
}

// interruptedExit delivers, at the exit of the skipped call, the signal
// that interrupted it (interruptedEntry).
func (e *engine) interruptedExit(regs proc.Regs) error {
	ev := e.sigAtExit
	e.sigAtExit = nil
	regs.Rax = ev.Regs.Rax // the restart code the kernel returned there
	if ev.Rewound() {
		// Already set up for the restart: back on the instruction, with
		// the number the handler's return issues.
		regs.Rip = ev.Regs.Rip
		if ev.Regs.Rax == format.SysRestartSyscall {
			e.restartAs = int(ev.Regs.OrigRax)
		}
	}
	at, err := e.deliver(ev, regs)
	if err != nil {
		return err
	}
	e.nextSig++
	if at, err = e.deliverAfter(ev.Seq, at); err != nil {
		return err
	}
	_, _, err = e.searchSignals(at)
	return err
}

// deliver delivers a recorded signal where the call it followed returns:
// it checks that the program stands where the recording saw the delivery,
// then puts in place what the recording saw at the handler's first
// instruction (format.Delivery): the signal frame, the registers, the
// extended state and the signal mask. The replay's own kernel never
// delivers anything. regs are the registers at the call's return; deliver
// returns those at the handler.
func (e *engine) deliver(ev *format.SignalEvent, regs proc.Regs) (proc.Regs, error) {
	name := signalName(ev.Signo)
	if diffs := regsDiff(ev.Regs, regs); len(diffs) > 0 {
		return regs, e.diverge(regs.Rip, ev.Seq, name+" delivered in another state",
			fmt.Sprintf("delivery at rip %#x", ev.Regs.Rip), strings.Join(diffs, ", "))
	}
	h := ev.Handler
	if err := e.touch(h.FrameAddr, len(h.Frame)); err != nil {
		return regs, err
	}
	if err := e.mem.WriteAt(h.Frame, h.FrameAddr); err != nil {
		return regs, e.diverge(regs.Rip, ev.Seq, name+": its signal frame is not mapped",
			fmt.Sprintf("%d bytes at %#x", len(h.Frame), h.FrameAddr), err.Error())
	}
	at := h.Regs
	at.OrigRax = regs.OrigRax // the kernel's view of the stop, not the program's
	if err := proc.SetRegs(e.stub.tid, at); err != nil {
		return regs, fmt.Errorf("deliver %s: %w", name, err)
	}
	if err := proc.SetXState(e.stub.tid, h.XState, e.xsave); err != nil {
		return regs, fmt.Errorf("deliver %s: %w", name, err)
	}
	if err := proc.SetSigmask(e.stub.tid, h.SigMask); err != nil {
		return regs, fmt.Errorf("deliver %s: %w", name, err)
	}
	if e.opts.Verbose {
		e.logf("%s delivered after #%d: handler at %#x", name, ev.Seq, at.Rip)
	}
	return at, nil
}

func describeRet(r int64) string {
	if r < 0 && r > -4096 {
		return fmt.Sprintf("%d (%v)", r, unix.Errno(-r))
	}
	return fmt.Sprintf("%#x", r)
}

func (e *engine) verified(rip uint64) *Result {
	if e.bp.hits > 0 {
		kind := "int3"
		switch {
		case e.bp.inproc != nil:
			kind = "compared in the process"
		case e.bp.hw:
			kind = "debug register"
		}
		e.logf("end found at breakpoint hit %d (%s) at %#x after the last syscall", e.bp.hits, kind, e.bp.addr)
	}
	if e.passedOn > 0 {
		e.logf("end found once a thread held at its stop had gone on to a later pass %d times", e.passedOn)
	}
	r := &Result{
		From:         e.c.Intervals[e.k].Index,
		Syscalls:     len(e.log),
		Intervals:    e.until - e.k,
		Threads:      len(e.threads) + e.ended,
		Until:        e.opts.Until,
		End:          e.end,
		Rip:          rip,
		Served:       e.servedPages(),
		ServedMapped: e.servedMappedPages(),
		InProcess:    e.inproc.completed(),
		XTests:       len(e.xtests),
		WrittenFirst: e.writtenFirst,
		Schedule:     e.sched,
	}
	if s := e.bp.inproc; s != nil {
		s.report(r)
	}
	for _, t := range e.threads {
		// The pages a thread's stop search compared a word of.
		for _, d := range t.endDiffs {
			r.EndWords = append(r.EndWords, d.Addr)
		}
	}
	return r
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// launch starts the stub and turns it into the recorded process at the start
// of the window: address space, seccomp filter, registers. It runs on the
// tracer thread.
func (e *engine) launch() error {
	var err error
	if e.stub, err = startStub(e.base, e.opts.CPU); err != nil {
		return err
	}
	if e.opts.Stub != nil {
		e.opts.Stub(e.stub.pid, true)
	}
	if e.mem, err = proc.OpenMem(e.stub.pid); err != nil {
		return err
	}
	if err := e.rebuild(); err != nil {
		return err
	}
	if e.inproc, err = e.setupInProcess(); err != nil {
		// Not a reason to give up the replay: every call stops then.
		e.logf("calls are not completed in the process: %v", err)
		e.inproc = nil
	}
	if err := e.installSeccomp(); err != nil {
		return err
	}
	if err := setThreadState(e.stub.tid, e.thread, e.xsave); err != nil {
		return err
	}
	if err := e.makeThreads(); err != nil {
		return err
	}
	// Signals the recording delivered before the first call of the window
	// (with several threads, to the one that runs first; the others' when
	// they first run, startSignals).
	return e.signalsAtStart(e.cur.rec.Regs)
}

// callAgain sets the current thread, stopped at the entry of call nr, to
// make that call again when resumed: on its syscall instruction, with the
// call's number in rax (a PTRACE_SYSEMU entry's call is skipped, and under
// PTRACE_SYSCALL orig_rax -1 skips it, so the call does not run twice).
func (e *engine) callAgain(regs proc.Regs, nr int) error {
	regs.Rip -= 2
	regs.Rax = uint64(nr)
	regs.OrigRax = ^uint64(0)
	if err := proc.SetRegs(e.stub.tid, regs); err != nil {
		return fmt.Errorf("make %s again: %w", syscalls.Name(nr), err)
	}
	return nil
}

// rseqRegistration reports whether rec registered an rseq area, and where.
func rseqRegistration(rec *format.Syscall) (uint64, bool) {
	const unregister = 1 // RSEQ_FLAG_UNREGISTER
	return rec.Args[0], rec.Nr == unix.SYS_RSEQ && rec.Ret == 0 && rec.Args[2]&unregister == 0 && rec.Args[1] >= 8
}

// rseqRegistered does to a newly registered rseq area what the kernel does
// on the way back to user space: it writes the thread's CPU number into
// cpu_id_start and cpu_id (struct rseq, linux/rseq.h). Replay does not
// register the area (a stub thread would get the replay machine's CPU
// numbers at any time), so without this a thread started in the window
// kept glibc's "not registered" value there, and a thread it started got
// no rseq registration: glibc passes rseq on only when the creator's
// cpu_id is a CPU number (nptl pthread_create), and the new thread skipped
// the recorded rseq call (testdata/spawner.c nested). The recorder cannot see
// the number the kernel wrote (it is written after the syscall's exit
// event); replay writes 0, the same on every run. The area is left out of
// every digest.
func (e *engine) rseqRegistered(area uint64) error {
	if err := e.touch(area, 8); err != nil {
		return err
	}
	return e.mem.WriteAt(make([]byte, 8), area)
}
