package replayer

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
)

// Position names one point of the replayed execution exactly, without a
// hardware counter: this machine has no performance counters, so "the Nth
// retired branch" cannot be asked for. The execution is split into stretches
// by the syscalls of the log (stretch N begins when syscall N of the window
// completes; stretch 0 at the start), and a point inside a stretch is named
// by an anchor the replayer can find again by counting with int3 breakpoints
// or debug registers, plus a number of single steps:
//
//   - Entry: the entry stop of the syscall that ends stretch Syscalls;
//   - Addr == 0 and no watch anchor: the first instruction of the stretch;
//   - Addr != 0: the Arrivals-th time the thread stood at Addr in the
//     stretch (the stretch's first instruction counts as an arrival);
//   - WatchHits > 0: right after the WatchHits-th trigger of Watches;
//
// then Steps instructions further. Determinism makes the name exact: going
// back to a position is re-executing from the start and counting again.
type Position struct {
	Syscalls  int
	Entry     bool
	Addr      uint64
	Arrivals  int
	WatchHits int
	Watches   []Watch
	Steps     int
}

func (p Position) String() string {
	var s string
	switch {
	case p.Entry:
		s = fmt.Sprintf("entry of syscall %d", p.Syscalls+1)
	case p.WatchHits > 0:
		s = fmt.Sprintf("stretch %d, watchpoint trigger %d", p.Syscalls, p.WatchHits)
	case p.Addr != 0:
		s = fmt.Sprintf("stretch %d, arrival %d at %#x", p.Syscalls, p.Arrivals, p.Addr)
	default:
		s = fmt.Sprintf("start of stretch %d", p.Syscalls)
	}
	if p.Steps > 0 {
		s += fmt.Sprintf(" + %d steps", p.Steps)
	}
	return s
}

// StopReason says why a Session stopped.
type StopReason int

// Stop reasons.
const (
	StopStep          StopReason = iota // one instruction done
	StopBreakpoint                      // at a breakpoint
	StopWatch                           // a watchpoint fired
	StopSyscallEntry                    // a caught syscall's entry
	StopSyscallReturn                   // a caught syscall's return
	StopEnd                             // the recorded end: Result says which
	StopPastEnd                         // asked to go past the recorded end
	StopHistoryStart                    // going back reached the start of the window
	StopInterrupt                       // stopped by Interrupt
)

// Stop describes where a Session stopped.
type Stop struct {
	Reason  StopReason
	Addr    uint64 // breakpoint address, or the watched address
	Watch   Watch
	Syscall int
	Result  *Result // StopEnd, StopPastEnd
}

// MaxReverseArrivals bounds the arrivals at one address a re-execution for
// going back may count: each is a stop of tens of microseconds. Going back
// from the end of a window that ended by a signal from outside in a loop
// without calls counted every pass over the end's address (764,244 for a
// lua loop crashed after 1.8 s) twice, a stop each: reverse-stepi did not
// answer for minutes. It now fails with a message saying so after about as
// many stops as a few seconds allow.
var MaxReverseArrivals = 100_000

// MaxReverseSteps bounds the single steps one reverse step may take to find
// the instruction before a point (from the previous arrival at the same
// address, or the start of the stretch), and MaxReverseStepTime the time
// they may take: a single step is 5 to 35 us on this project's VM, and
// reverse-stepi from python3's crash in strlen, millions of instructions
// after its last syscall, did not answer for minutes (found by a sweep).
var (
	MaxReverseSteps    = 20_000_000
	MaxReverseStepTime = 10 * time.Second
)

// command is one forward command, kept so that a stop whose position could
// not be named on the way can be named by doing the commands again.
type command struct {
	step    bool
	from    int // the stretch the command started in
	bps     map[uint64]bool
	watches []Watch
	catch   catchSet
}

// Session is a replay driven one command at a time, forward and backward:
// the engine of Run under a debugger's control. All methods must be called
// from one goroutine, except Interrupt.
type Session struct {
	c     *format.Checkpoint
	pages format.PageSource
	opts  Options
	tr    *proc.Tracer
	e     *engine

	user    map[uint64]bool
	watches []Watch
	catch   catchSet

	// The current position is base followed by cmds; known is false after an
	// interrupt (a stop at a moment, which no command can reproduce).
	base  Position
	cmds  []command
	known bool

	mu        sync.Mutex
	interrupt *atomic.Bool
	closed    bool
	// Reexecutions counts the replays from the start that going back and
	// naming positions took; FromSnapshot those that started from a
	// snapshot instead (snapshot.go).
	Reexecutions int
	FromSnapshot int

	sel int // SelectThread's thread, 0 for the current one

	snaps       []*engine // stopped forks of the replay, by stretch
	noSnapshots bool      // TPREPLAY_NO_SNAPSHOTS=1, or a fork failed
	// SnapshotErr is why snapshots stopped being taken, if one failed.
	SnapshotErr error
}

// NewSession prepares a replay of c and stops it at its first instruction
// (the start of the interval opts.From, or the oldest replayable one).
func NewSession(c *format.Checkpoint, pages format.PageSource, opts Options) (*Session, error) {
	s := &Session{c: c, pages: pages, opts: opts, user: map[uint64]bool{}, known: true, interrupt: &atomic.Bool{},
		noSnapshots: os.Getenv("TPREPLAY_NO_SNAPSHOTS") == "1"}
	s.tr = proc.NewTracer()
	e, err := s.newEngine(nil)
	if err != nil {
		s.tr.Close()
		return nil, err
	}
	s.e = e
	s.base = Position{}
	return s, nil
}

// Close kills the replayed process.
func (s *Session) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	_ = s.tr.Do(func() error {
		s.killEngine(s.e)
		s.dropSnapshots()
		return nil
	})
	s.tr.Close()
}

// Checkpoint returns the checkpoint being replayed.
func (s *Session) Checkpoint() *format.Checkpoint { return s.c }

// From is the Index of the interval the replay starts at (Options.From, or
// the nearest earlier interval whose start the checkpoint stores).
func (s *Session) From() int { return s.e.c.Intervals[s.e.k].Index }

// Tid is the recorded id of the thread the replay stands in: the one the
// checkpoint ends in, or with several threads the one that stopped last
// (replayer/threads.go runs one at a time).
func (s *Session) Tid() int { return s.e.cur.rec.Tid }

// Threads lists the recorded ids of the threads the replay runs, the one
// the checkpoint ends in first.
func (s *Session) Threads() []int {
	out := []int{s.e.thread.Tid}
	for _, t := range s.e.others {
		out = append(out, t.Tid)
	}
	return out
}

// SelectThread makes Regs and XState read thread tid (recorded id; 0 or -1:
// the one the replay stands in) until the next resume.
func (s *Session) SelectThread(tid int) error {
	if tid <= 0 {
		s.sel = 0
		return nil
	}
	if s.e.threads[tid] == nil && tid != s.e.thread.Tid {
		return fmt.Errorf("no thread %d in the replay", tid)
	}
	s.sel = tid
	return nil
}

// regsTid is the replay's id of the thread Regs and XState read.
func (s *Session) regsTid() int {
	if t := s.e.threads[s.sel]; t != nil && t.tid != 0 {
		return t.tid
	}
	return s.e.stub.tid
}

// Pid is the process id of the replay process (it changes when the session
// goes back).
func (s *Session) Pid() int { return s.e.stub.pid }

// Position returns the current position and whether it is known.
func (s *Session) Position() (Position, bool) {
	return s.base, s.known && len(s.cmds) == 0
}

// newEngine starts a replay process at the start of the window. Tracked
// addresses given are counted from the first instruction.
func (s *Session) newEngine(user map[uint64]bool) (*engine, error) {
	opts := s.opts
	e, err := prepare(s.c, s.pages, opts)
	if err != nil {
		return nil, err
	}
	e.dbg = newDebugState()
	e.dbg.snap = s.maybeSnapshot
	for a := range user {
		e.dbg.user[a] = true
	}
	e.dbg.interrupt = s.interrupt
	e.timeout = 0
	err = s.tr.Do(func() error {
		if err := e.launch(); err != nil {
			return err
		}
		regs, err := proc.GetRegs(e.stub.tid)
		if err != nil {
			return err
		}
		if err := e.stretchStart(regs.Rip); err != nil {
			return err
		}
		if len(e.log) == 0 {
			res, err := e.atLogEnd(regs)
			if err != nil {
				return err
			}
			e.dbg.ended = res
		}
		return nil
	})
	if err != nil {
		_ = s.tr.Do(func() error { s.killEngine(e); return nil })
		return nil, fmt.Errorf("rebuild process: %w", err)
	}
	return e, nil
}

func (s *Session) killEngine(e *engine) {
	if e == nil {
		return
	}
	if e.mem != nil {
		e.mem.Close()
		e.mem = nil
	}
	e.stub.kill()
}

// swap makes e the current engine.
func (s *Session) swap(e *engine) {
	old := s.e
	s.e = e
	e.dbg.limit = 0 // forward commands count what they must
	_ = s.tr.Do(func() error { s.killEngine(old); return nil })
}

// Regs returns the thread's general registers.
func (s *Session) Regs() (proc.Regs, error) {
	var r proc.Regs
	err := s.tr.Do(func() error {
		tid := s.regsTid()
		if s.e.dbg.atEntry && tid == s.e.stub.tid {
			r = s.e.dbg.entryRegs
			return nil
		}
		var err error
		r, err = proc.GetRegs(tid)
		return err
	})
	return r, err
}

// ThreadRegs returns the general registers of thread tid (recorded id; 0 or
// -1: the selected one) without changing which thread Regs reads.
func (s *Session) ThreadRegs(tid int) (proc.Regs, error) {
	if tid <= 0 {
		return s.Regs()
	}
	old := s.sel
	defer func() { s.sel = old }()
	if err := s.SelectThread(tid); err != nil {
		return proc.Regs{}, err
	}
	return s.Regs()
}

// XState returns the thread's XSAVE image.
func (s *Session) XState() ([]byte, error) {
	var x []byte
	err := s.tr.Do(func() error {
		var err error
		x, err = proc.GetXState(s.regsTid())
		return err
	})
	return x, err
}

// ErrNotInCheckpoint is returned for memory the checkpoint does not hold.
var ErrNotInCheckpoint = errors.New("memory not in the checkpoint")

// ReadMemory reads the program's memory at addr into buf, without the
// replayer's breakpoints. Pages the checkpoint lacks are refused rather than
// shown as zeros. It returns how many bytes were read.
func (s *Session) ReadMemory(addr uint64, buf []byte) (int, error) {
	n := 0
	err := s.tr.Do(func() error {
		for n < len(buf) {
			a := addr + uint64(n)
			if _, ok := s.e.guards.find(a); ok {
				return fmt.Errorf("read %#x: %w", a, ErrNotInCheckpoint)
			}
			chunk := min(len(buf)-n, int(pageDown(a)+pageSize-a))
			if err := s.e.readMem(buf[n:n+chunk], a); err != nil {
				return err
			}
			n += chunk
		}
		return nil
	})
	return n, err
}

// SetBreakpoint and ClearBreakpoint manage the debugger's software
// breakpoints. They are invisible to ReadMemory and to the end-state check.
//
// A breakpoint on code the checkpoint does not hold is accepted and left out:
// the window never executes there (it would have touched the page), and GDB
// puts internal breakpoints in library code it cannot know is absent.
func (s *Session) SetBreakpoint(addr uint64) error {
	var b [1]byte
	if _, err := s.ReadMemory(addr, b[:]); errors.Is(err, ErrNotInCheckpoint) {
		return nil
	} else if err != nil {
		return fmt.Errorf("breakpoint at %#x: %w", addr, err)
	}
	s.user[addr] = true
	return nil
}

// ClearBreakpoint removes a breakpoint.
func (s *Session) ClearBreakpoint(addr uint64) error {
	delete(s.user, addr)
	return nil
}

// SetWatches replaces the hardware watchpoints (at most 4).
func (s *Session) SetWatches(ws []Watch) error {
	if len(ws) > 4 {
		return fmt.Errorf("%d watchpoints: x86 has 4 debug address registers", len(ws))
	}
	s.watches = append([]Watch(nil), ws...)
	return nil
}

// Watches returns the current watchpoints.
func (s *Session) Watches() []Watch { return s.watches }

// CatchSyscalls makes Continue stop at the entry and return of the given
// syscalls (all of them when all is set); off turns catching off.
func (s *Session) CatchSyscalls(on, all bool, nrs []int) {
	c := catchSet{on: on, all: all, nrs: map[int]bool{}}
	for _, n := range nrs {
		c.nrs[n] = true
	}
	s.catch = c
}

// Interrupt asks a running Continue to stop. Safe from any goroutine.
func (s *Session) Interrupt() {
	s.interrupt.Store(true)
	_ = s.e.stub.proc.Signal(syscall.SIGSTOP)
}

// AtEntry reports a stop at a syscall's entry (the registers are those the
// program had when it made the call).
func (s *Session) AtEntry() bool { return s.e.dbg.atEntry }

// Ended returns the recorded end when the session stands there.
func (s *Session) Ended() *Result { return s.e.dbg.ended }

// apply loads the session's breakpoints and watchpoints into the engine
// before it runs. Addresses new in the middle of a stretch are counted from
// now on only: positions at them are named later, by doing the commands again.
func (s *Session) apply(e *engine) error {
	atStart := s.known && len(s.cmds) == 0 && s.base.Steps == 0 && s.base.Addr == 0 && s.base.WatchHits == 0 && !s.base.Entry
	d := e.dbg
	for a := range d.user {
		if !s.user[a] {
			delete(d.user, a)
		}
	}
	for a := range s.user {
		d.user[a] = true
		if err := e.trackAddr(a, atStart); err != nil {
			return err
		}
	}
	if !sameWatches(d.watches, s.watches) {
		if err := e.setWatches(s.watches); err != nil {
			return err
		}
		d.watchClean = atStart
	}
	d.catch = s.catch
	return nil
}

func sameWatches(a, b []Watch) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Step executes one instruction.
func (s *Session) Step() (Stop, error) {
	s.sel = 0
	if res := s.e.dbg.ended; res != nil {
		return Stop{Reason: StopPastEnd, Result: res}, nil
	}
	cmd := command{step: true}
	var ev dEvent
	err := s.tr.Do(func() error {
		if err := s.apply(s.e); err != nil {
			return err
		}
		var err error
		ev, err = s.e.exec(execOpts{step: true})
		return err
	})
	if err != nil {
		return Stop{}, err
	}
	s.note(cmd, ev)
	return s.stopFor(s.e, ev, true), nil
}

// Continue runs until a breakpoint, a watchpoint, a caught syscall, the
// recorded end, or Interrupt.
func (s *Session) Continue() (Stop, error) {
	s.sel = 0
	if res := s.e.dbg.ended; res != nil {
		return Stop{Reason: StopPastEnd, Result: res}, nil
	}
	cmd := command{from: s.e.next, bps: copySet(s.user), watches: s.watches, catch: s.catch}
	var ev dEvent
	err := s.tr.Do(func() error {
		if err := s.apply(s.e); err != nil {
			return err
		}
		var err error
		ev, err = s.e.exec(execOpts{onEvent: stopsContinue(s.e, cmd)})
		return err
	})
	if err != nil {
		return Stop{}, err
	}
	if ev.kind == dInterrupt {
		s.known = false
	}
	s.note(cmd, ev)
	return s.stopFor(s.e, ev, false), nil
}

// stopsContinue is the stop condition of a forward continue.
func stopsContinue(e *engine, cmd command) func(ev dEvent) bool {
	return func(ev dEvent) bool {
		switch ev.kind {
		case dArrive:
			return cmd.bps[ev.addr]
		case dWatch:
			return true
		case dEntry:
			return cmd.catch.wants(ev.nr)
		case dExit:
			if cmd.catch.wants(ev.nr) {
				return true
			}
			_, hit := e.outputHitsWatch()
			return hit
		}
		return false
	}
}

func copySet(m map[uint64]bool) map[uint64]bool {
	out := make(map[uint64]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// stopFor describes ev to the caller.
func (s *Session) stopFor(e *engine, ev dEvent, step bool) Stop {
	switch ev.kind {
	case dEnd:
		return Stop{Reason: StopEnd, Result: ev.res}
	case dInterrupt:
		return Stop{Reason: StopInterrupt}
	case dWatch:
		return Stop{Reason: StopWatch, Addr: ev.watch.Addr, Watch: ev.watch}
	case dEntry:
		if !step {
			return Stop{Reason: StopSyscallEntry, Syscall: ev.nr}
		}
	case dExit:
		if !step {
			if w, hit := e.outputHitsWatch(); hit && !s.catch.wants(ev.nr) {
				return Stop{Reason: StopWatch, Addr: w.Addr, Watch: w}
			}
			return Stop{Reason: StopSyscallReturn, Syscall: ev.nr}
		}
	case dArrive:
		if !step {
			return Stop{Reason: StopBreakpoint, Addr: ev.addr}
		}
	}
	return Stop{Reason: StopStep}
}

// here names the point ev stopped at, when the engine's counts allow it.
func (e *engine) here(ev dEvent) (Position, bool) {
	d := e.dbg
	switch ev.kind {
	case dEntry:
		return Position{Syscalls: e.next, Entry: true}, true
	case dExit:
		return Position{Syscalls: e.next}, true
	case dWatch:
		if d.watchClean {
			return Position{Syscalls: e.next, WatchHits: d.hits, Watches: d.watches}, true
		}
	}
	if d.atEntry {
		return Position{Syscalls: e.next, Entry: true}, true
	}
	if d.fresh {
		return Position{Syscalls: e.next}, true
	}
	if t := d.track[ev.regs.Rip]; t != nil && t.clean && t.count > 0 {
		return Position{Syscalls: e.next, Addr: ev.regs.Rip, Arrivals: t.count}, true
	}
	return Position{}, false
}

// note updates the current position after a forward command.
func (s *Session) note(cmd command, ev dEvent) {
	if !s.known {
		return
	}
	if p, ok := s.e.here(ev); ok {
		s.base, s.cmds = p, nil
		return
	}
	if cmd.step && len(s.cmds) == 0 && ev.kind != dEnd {
		s.base.Steps++
		return
	}
	s.cmds = append(s.cmds, cmd)
}

// ErrUnknownPosition is returned when going back from a point no command can
// reproduce (a stop by Interrupt).
var ErrUnknownPosition = errors.New("the current point was reached by an interrupt and cannot be found again: continue to a breakpoint or syscall first")

// resolve names the current position exactly when commands since the last
// named one left it unnamed: it re-executes from the start, counting arrivals
// at the current instruction, and does the same commands again.
func (s *Session) resolve() error {
	if !s.known {
		return ErrUnknownPosition
	}
	if len(s.cmds) == 0 {
		return nil
	}
	regs, err := s.Regs()
	if err != nil {
		return err
	}
	rip := regs.Rip
	// A continue stops at the first point its conditions name, whatever
	// happened before: when a snapshot lies past the stretch the last
	// command started in, that command alone, run from the snapshot,
	// stops at the same point.
	from, cmds := s.base, s.cmds
	if last := s.cmds[len(s.cmds)-1]; !last.step {
		if m, ok := s.snapshotIn(last.from+1, s.e.next); ok {
			from, cmds = Position{Syscalls: m}, s.cmds[len(s.cmds)-1:]
		}
	}
	e, err := s.engineAt(from.Syscalls, nil)
	if err != nil {
		return err
	}
	var p Position
	err = s.tr.Do(func() error {
		if err := e.reach(from, nil, []uint64{rip}); err != nil {
			return err
		}
		var ev dEvent
		for _, cmd := range cmds {
			for a := range e.dbg.user {
				delete(e.dbg.user, a)
			}
			for a := range cmd.bps {
				e.dbg.user[a] = true
				if err := e.trackAddr(a, false); err != nil {
					return err
				}
			}
			if !sameWatches(e.dbg.watches, cmd.watches) {
				if err := e.setWatches(cmd.watches); err != nil {
					return err
				}
				e.dbg.watchClean = false
			}
			var err error
			if cmd.step {
				ev, err = e.exec(execOpts{step: true})
			} else {
				ev, err = e.exec(execOpts{onEvent: stopsContinue(e, cmd)})
			}
			if err != nil {
				return err
			}
		}
		var ok bool
		if p, ok = e.here(ev); !ok {
			return fmt.Errorf("name the current position: %#x not counted", rip)
		}
		return nil
	})
	if err != nil {
		_ = s.tr.Do(func() error { s.killEngine(e); return nil })
		return fmt.Errorf("go back: %w", err)
	}
	s.base, s.cmds = p, nil
	s.swap(e)
	return nil
}

// reach runs a fresh engine (stopped at the start) to p. keep lists addresses
// to count from p's stretch on; the session's breakpoints are counted too,
// so positions at them are named right away afterwards.
func (e *engine) reach(p Position, user map[uint64]bool, keep []uint64) error {
	d := e.dbg
	if p.Syscalls > len(e.log) {
		return fmt.Errorf("position %v: the window has %d syscalls", p, len(e.log))
	}
	for e.next < p.Syscalls {
		ev, err := e.exec(execOpts{onEvent: func(ev dEvent) bool { return ev.kind == dExit && e.next == p.Syscalls }})
		if err != nil {
			return err
		}
		if ev.kind == dEnd && e.next < p.Syscalls {
			return fmt.Errorf("position %v: the replay ended before", p)
		}
	}
	regs, err := proc.GetRegs(e.stub.tid)
	if err != nil {
		return err
	}
	for a := range user {
		d.user[a] = true
	}
	for _, a := range keep {
		d.keep[a] = true
	}
	if p.Addr != 0 {
		d.keep[p.Addr] = true
	}
	for a := range d.keep {
		if err := e.trackAddr(a, true); err != nil {
			return err
		}
	}
	if len(p.Watches) > 0 {
		if err := e.setWatches(p.Watches); err != nil {
			return err
		}
	}
	if err := e.stretchStart(regs.Rip); err != nil {
		return err
	}
	d.watchClean = true
	var ev dEvent
	lost := func(ev dEvent) error {
		return fmt.Errorf("position %v not found: the replay met %v first", p, ev.kind)
	}
	switch {
	case p.Entry:
		ev, err = e.exec(execOpts{onEvent: func(ev dEvent) bool { return ev.kind == dEntry || ev.kind == dExit }})
		// The recording may end at this entry.
		if err == nil && ev.kind != dEntry && !(ev.kind == dEnd && d.atEntry) {
			err = lost(ev)
		}
	case p.WatchHits > 0:
		ev, err = e.exec(execOpts{onEvent: func(ev dEvent) bool {
			return ev.kind == dWatch && d.hits >= p.WatchHits || ev.kind == dExit || ev.kind == dEntry
		}})
		if err == nil && ev.kind != dWatch {
			err = lost(ev)
		}
	case p.Addr != 0:
		t := d.track[p.Addr]
		if t.count < p.Arrivals {
			if s := t.search; s != nil {
				// The process counts the passes: its code stops at the one
				// that makes the arrival.
				s.countStop(p.Arrivals - t.stepped + t.off)
				defer s.countStop(0)
			}
			ev, err = e.exec(execOpts{onEvent: func(ev dEvent) bool {
				// A trigger landing on p.Addr counts the arrival too.
				at := ev.kind == dArrive && ev.addr == p.Addr || ev.kind == dWatch && ev.regs.Rip == p.Addr
				return at && t.count >= p.Arrivals || ev.kind == dExit || ev.kind == dEntry
			}})
			// The end may be the arrival itself: a thread that becomes
			// current where it waited meets the end there.
			atEnd := ev.kind == dEnd && ev.regs.Rip == p.Addr && t.count >= p.Arrivals
			if err == nil && ev.kind != dArrive && ev.kind != dWatch && !atEnd {
				err = lost(ev)
			}
		}
	}
	if err != nil {
		return err
	}
	for i := 0; i < p.Steps; i++ {
		ev, err = e.exec(execOpts{step: true})
		if err != nil {
			return err
		}
		if ev.kind == dEnd {
			return fmt.Errorf("position %v: the replay ended after %d steps", p, i)
		}
	}
	return nil
}

// goTo replaces the current engine by a fresh one standing at p.
func (s *Session) goTo(p Position) error {
	e, err := s.engineAt(p.Syscalls, nil)
	if err != nil {
		return err
	}
	err = s.tr.Do(func() error {
		// The session's watchpoints in place from the start keep their
		// triggers in p's stretch counted, so a forward stop at one is named
		// right away.
		if len(p.Watches) == 0 && len(s.watches) > 0 {
			if err := e.setWatches(s.watches); err != nil {
				return err
			}
		}
		return e.reach(p, s.user, nil)
	})
	if err != nil {
		_ = s.tr.Do(func() error { s.killEngine(e); return nil })
		return err
	}
	s.swap(e)
	s.base, s.cmds, s.known = p, nil, true
	return nil
}

// ReverseStep goes back one instruction.
func (s *Session) ReverseStep() (Stop, error) {
	s.sel = 0
	if err := s.resolve(); err != nil {
		return Stop{}, err
	}
	regs, err := s.Regs()
	if err != nil {
		return Stop{}, err
	}
	p, ok, err := s.stepBack(s.base, regs.Rip)
	if err != nil {
		return Stop{}, err
	}
	if !ok {
		return Stop{Reason: StopHistoryStart}, nil
	}
	return Stop{Reason: StopStep}, s.goTo(p)
}

// stepBack names the point one instruction before p, where the thread stands
// at rip; ok is false at the start of the window.
func (s *Session) stepBack(p Position, rip uint64) (Position, bool, error) {
	switch {
	case p.Steps > 0:
		p.Steps--
		if p.Steps == 0 && p.Addr == 0 && p.WatchHits == 0 && !p.Entry {
			p = Position{Syscalls: p.Syscalls}
		}
		return p, true, nil
	case p.Entry && s.e.severalThreads():
		return s.beforeEntry(p.Syscalls)
	case p.Entry:
		// Back to the syscall instruction itself, the stretch's last.
		return Position{Syscalls: p.Syscalls, Addr: rip - 2, Arrivals: 1}, true, nil
	case p.Addr == 0 && p.WatchHits == 0:
		if p.Syscalls == 0 {
			return Position{}, false, nil
		}
		if s.e.severalThreads() {
			return s.beforeEntry(p.Syscalls - 1)
		}
		// The instruction before a stretch is the syscall that ended the
		// previous one: the only arrival there in that stretch.
		return Position{Syscalls: p.Syscalls - 1, Addr: rip - 2, Arrivals: 1}, true, nil
	}
	// From the previous landmark (the previous arrival or trigger, or the
	// stretch start), count the instructions up to here; the point before is
	// one fewer.
	mark := Position{Syscalls: p.Syscalls}
	if p.WatchHits > 1 {
		mark.WatchHits, mark.Watches = p.WatchHits-1, p.Watches
	} else if p.Addr != 0 && p.Arrivals > 1 {
		mark.Addr, mark.Arrivals = p.Addr, p.Arrivals-1
	}
	e, err := s.engineAt(mark.Syscalls, nil)
	if err != nil {
		return Position{}, false, err
	}
	n := 0
	err = s.tr.Do(func() error {
		defer s.killEngine(e)
		keep := []uint64(nil)
		if p.Addr != 0 {
			keep = []uint64{p.Addr}
		}
		if p.WatchHits > 0 && mark.WatchHits == 0 {
			if err := e.setWatches(p.Watches); err != nil {
				return err
			}
		}
		if err := e.reach(mark, nil, keep); err != nil {
			return err
		}
		began := time.Now()
		for {
			ev, err := e.exec(execOpts{step: true})
			if err != nil {
				return err
			}
			n++
			if p.WatchHits > 0 && ev.kind == dWatch && e.dbg.hits >= p.WatchHits {
				return nil
			}
			if p.Addr != 0 && ev.regs.Rip == p.Addr && e.dbg.track[p.Addr].count >= p.Arrivals {
				return nil
			}
			if ev.kind == dEnd || ev.kind == dExit || ev.kind == dEntry {
				return fmt.Errorf("go back one instruction: %v not found from %v", p, mark)
			}
			if n > MaxReverseSteps || n%1024 == 0 && time.Since(began) > MaxReverseStepTime {
				return fmt.Errorf("go back one instruction: the instruction before lies more than %d instructions after %v, and each is a single step: set a breakpoint on an instruction that runs shortly before this point (the start of this function) and reverse-continue to it", n, mark)
			}
		}
	})
	if err != nil {
		return Position{}, false, err
	}
	mark.Steps = n - 1
	return mark, true, nil
}

// beforeEntry names the point just before the entry of the call that ends
// stretch k, in a window of several threads. There the syscall instruction
// that ran last may be another thread's than the one whose call it is (a
// thread that parked at its own call, which another thread's call
// precedes in the log), other threads may have stood at the same address
// earlier in the stretch (the same libc wrapper), and the entry may have
// come with the switch at the stretch's start, nothing of the stretch
// having run. The engine notes at each entry what ran just before it
// (entryMark); a run to the entry with that address counted gives the
// arrival.
func (s *Session) beforeEntry(k int) (Position, bool, error) {
	m := s.e.dbg.entry
	if !m.ok || m.k != k {
		var err error
		if m, _, err = s.runToEntry(k, 0); err != nil {
			return Position{}, false, err
		}
	}
	if m.fresh {
		return Position{Syscalls: k}, true, nil
	}
	_, n, err := s.runToEntry(k, m.sysAt)
	if err != nil {
		return Position{}, false, err
	}
	if n == 0 {
		return Position{}, false, fmt.Errorf("go back one instruction: the syscall instruction at %#x before the entry of syscall %d was not counted", m.sysAt, k+1)
	}
	return Position{Syscalls: k, Addr: m.sysAt, Arrivals: n}, true, nil
}

// runToEntry replays up to the entry of the call that ends stretch k and
// returns what the engine noted there, and with addr != 0 the arrivals at
// addr in the stretch.
func (s *Session) runToEntry(k int, addr uint64) (entryMark, int, error) {
	e, err := s.engineAt(k, nil)
	if err != nil {
		return entryMark{}, 0, err
	}
	var keep []uint64
	if addr != 0 {
		keep = []uint64{addr}
	}
	var m entryMark
	n := 0
	err = s.tr.Do(func() error {
		defer s.killEngine(e)
		if err := e.reach(Position{Syscalls: k, Entry: true}, nil, keep); err != nil {
			return err
		}
		m = e.dbg.entry
		if t := e.dbg.track[addr]; addr != 0 && t != nil {
			n = t.count
		}
		return nil
	})
	if err == nil && (!m.ok || m.k != k) {
		err = fmt.Errorf("go back one instruction: the entry of syscall %d was not seen", k+1)
	}
	return m, n, err
}

// ReverseContinue goes back to the last breakpoint, watchpoint trigger or
// caught syscall before the current point, or to the start of the window.
//
// A watchpoint going backwards stops where GDB expects it: at the instruction
// that made the change, before it ran (the old value still in memory), which
// is one instruction before the point a forward continue stops at. So a
// trigger counts when the point after it is not later than the current one,
// and the stop is the instruction before that point; for memory a replayed
// syscall wrote, the syscall instruction.
func (s *Session) ReverseContinue() (Stop, error) {
	s.sel = 0
	if err := s.resolve(); err != nil {
		return Stop{}, err
	}
	target := s.base
	cmd := command{bps: copySet(s.user), watches: s.watches, catch: s.catch}
	var (
		last     *Position
		lastStop Stop
		before   bool   // last names the point after a trigger: stop one instruction earlier
		lastRip  uint64 // where the thread stood at last
	)
	// The window is searched backwards by segments: from the latest
	// snapshot before the current point up to it, then from the snapshot
	// before that up to the first one's stretch, and so on to the start of
	// the window. The last stop of the latest segment that has one is the
	// stop wanted.
	stretch, end := target.Syscalls, -1 // end: the segment ends at stretch end; -1: at the target
	for last == nil {
		e, err := s.engineAt(stretch, s.user)
		if err != nil {
			return Stop{}, err
		}
		start := e.next
		err = s.tr.Do(func() error {
			defer s.killEngine(e)
			d := e.dbg
			if len(s.watches) > 0 {
				if err := e.setWatches(s.watches); err != nil {
					return err
				}
				d.watchClean = true
			}
			d.catch = s.catch
			// record keeps ev when it is a stop of a continue; here says ev
			// is the current point itself, which only a trigger's earlier
			// instruction is before.
			record := func(ev dEvent, here bool) {
				if !stopsContinue(e, cmd)(ev) {
					return
				}
				st := s.stopFor(e, ev, false)
				if here && st.Reason != StopWatch {
					return
				}
				if p, ok := e.here(ev); ok {
					last, lastStop, lastRip = &p, st, ev.regs.Rip
					before = st.Reason == StopWatch
				}
			}
			if end >= 0 {
				// Up to the start of the segment searched before (a stop
				// at the exit that begins it is this segment's).
				_, err := e.exec(execOpts{onEvent: func(ev dEvent) bool {
					record(ev, false)
					return ev.kind == dExit && e.next >= end || ev.kind == dEnd
				}})
				return err
			}
			if target.Addr != 0 {
				d.keep[target.Addr] = true
				if err := e.trackAddr(target.Addr, true); err != nil {
					return err
				}
				e.arrive0(target.Addr)
			}
			atAnchor := func() bool {
				if e.next != target.Syscalls {
					return false
				}
				switch {
				case target.Entry:
					return d.atEntry
				case target.WatchHits > 0:
					return d.hits >= target.WatchHits
				case target.Addr != 0:
					t := d.track[target.Addr]
					return t != nil && t.count >= target.Arrivals
				}
				return true
			}
			if atAnchor() && target.Steps == 0 {
				return nil
			}
			if !atAnchor() {
				_, err := e.exec(execOpts{onEvent: func(ev dEvent) bool {
					if atAnchor() {
						record(ev, target.Steps == 0)
						return true
					}
					record(ev, false)
					return false
				}})
				if err != nil {
					return err
				}
			}
			for i := 0; i < target.Steps; i++ {
				ev, err := e.exec(execOpts{step: true})
				if err != nil {
					return err
				}
				record(ev, i == target.Steps-1)
			}
			return nil
		})
		if err != nil {
			return Stop{}, err
		}
		if start == 0 {
			break
		}
		stretch, end = start-1, start
	}
	if last == nil {
		if err := s.goTo(Position{}); err != nil {
			return Stop{}, err
		}
		return Stop{Reason: StopHistoryStart}, nil
	}
	p := *last
	if before {
		var ok bool
		var err error
		if p, ok, err = s.stepBack(p, lastRip); err != nil {
			return Stop{}, err
		}
		if !ok {
			p = Position{}
		}
	}
	if err := s.goTo(p); err != nil {
		return Stop{}, err
	}
	return lastStop, nil
}

// arrive0 counts an arrival at addr when the thread stands there right now
// (tracking started after the stretch's first arrival was counted).
func (e *engine) arrive0(addr uint64) {
	regs, err := proc.GetRegs(e.stub.tid)
	if err == nil && regs.Rip == addr {
		if t := e.dbg.track[addr]; t != nil && t.count == 0 {
			t.count = 1
		}
	}
}
