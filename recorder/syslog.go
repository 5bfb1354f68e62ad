package recorder

import (
	"bytes"
	"fmt"
	"iter"
	"slices"
	"time"
	"unsafe"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// source delivers the syscall log of the target. The ptrace source logs each
// call at its syscall-exit stop; a source that collects records elsewhere
// (the eBPF ringbuf) hands them over in sync.
type source interface {
	// name is the backend name written into the checkpoint header.
	name() string
	// resumeRequest is the ptrace request that restarts the target after any
	// stop: PTRACE_SYSCALL when the source needs syscall stops, else PTRACE_CONT.
	resumeRequest() int
	// sync is called with the target stopped, before an interval closes: it
	// must put every syscall completed so far into the interval's log.
	sync(s *session) error
	// ownSignal reports whether a signal stop is one the source caused
	// (then the session handles it and suppresses the signal).
	ownSignal(sig int) bool
	// catchUp runs after the session handled an own signal: the source
	// may hold the stopped thread until its reader has caught up.
	catchUp()
	// heldFor reports how many stops catchUp held, and for how long.
	heldFor() (int, time.Duration)
	// opened is called when an interval has started, the target still
	// stopped (after the recorder's own injected calls).
	opened(s *session) error
	// checkWritten sees the pagemap's written set of the interval that
	// sync closed, over the mappings present at its start.
	checkWritten(s *session, maps []format.Mapping, written []uint64)
	// activity counts the calls of the open interval the source holds or
	// has not read yet, and the pages it saw written other than the
	// kernel's writes to the pages of own (skipTick). A source whose calls
	// are stops counts neither: the session counts its stops.
	activity(own []uint64) (calls, pages int)
	// lastSeq returns the sequence number of the last syscall the target
	// completed, called with the thread that matters stopped.
	lastSeq(s *session) (uint64, error)
	close()
}

// ptraceSource reads syscall results at PTRACE_SYSCALL exit stops.
type ptraceSource struct{}

func (ptraceSource) name() string                                      { return "ptrace" }
func (ptraceSource) resumeRequest() int                                { return unix.PTRACE_SYSCALL }
func (ptraceSource) sync(s *session) error                             { return nil }
func (ptraceSource) opened(s *session) error                           { return nil }
func (ptraceSource) ownSignal(sig int) bool                            { return false }
func (ptraceSource) catchUp()                                          {}
func (ptraceSource) heldFor() (int, time.Duration)                     { return 0, 0 }
func (ptraceSource) close()                                            {}
func (ptraceSource) checkWritten(*session, []format.Mapping, []uint64) {}
func (ptraceSource) lastSeq(s *session) (uint64, error)                { return s.seq, nil }

func (ptraceSource) activity([]uint64) (int, int) { return 0, 0 }

// appendSyscall adds one completed syscall to the current interval, giving
// it the next sequence number. problem, if set, says why its outputs could
// not be captured. A syscall the table does not know or declares unsupported
// makes the interval not replayable, naming it: the recorder never guesses
// what an unknown call wrote.
func (s *session) appendSyscall(rec format.Syscall, problem string) {
	if s.cur == nil {
		return
	}
	s.seq++
	rec.Seq = s.seq
	restarted(&rec, s.restarts)
	if why := s.vforks.replayProblem(&rec, problem); why != "" {
		s.notReplayable(why)
	}
	s.noteMmap(&rec)
	if _, n := format.MemoryChanges(&rec); n > 0 {
		s.cur.memCalls = append(s.cur.memCalls, s.cur.syscalls.len())
	}
	s.cur.syscalls.append(rec)
}

// restarted turns a restart_syscall record into the call it finishes: one
// the kernel interrupted with ERESTART_RESTARTBLOCK (a boundary stop did, or
// it was in progress when recording began). The program sees one call, so
// the log holds one: the interrupted call with the final result and what it
// wrote (poll's revents, nanosleep's remainder). Any call of the thread ends
// the wait for it.
func restarted(rec *format.Syscall, restarts map[int]*proc.SyscallInfo) {
	r := restarts[rec.Tid]
	if r == nil {
		return
	}
	if rec.Nr == unix.SYS_RESTART_SYSCALL {
		rec.Nr, rec.Args = int(r.Nr), r.Args
	}
	delete(restarts, rec.Tid)
}

// replayProblem says why a logged call makes its interval not replayable:
// a call outside the table, one replay cannot do, an argument form it does
// not support, or a problem the source met building the record. A call that
// may have made a vfork child gets the outputs its capture took (vfork.go).
func (v *vforkCaptures) replayProblem(rec *format.Syscall, problem string) string {
	if problem == "" && vforkCall(rec) {
		return v.outputs(rec)
	}
	d, ok := syscalls.Lookup(rec.Nr)
	switch {
	case !ok:
		return fmt.Sprintf("syscall %s (%d) at seq %d is not in the syscall table", syscalls.Name(rec.Nr), rec.Nr, rec.Seq)
	case d.Kind == syscalls.Unsupported:
		return fmt.Sprintf("syscall %s at seq %d cannot be replayed: %s", d.Name, rec.Seq, d.Note)
	}
	if ok, why := syscalls.Check(d, rec.Args); !ok {
		return fmt.Sprintf("seq %d cannot be replayed: %s", rec.Seq, why)
	}
	if problem != "" {
		return fmt.Sprintf("syscall %s at seq %d: %s", d.Name, rec.Seq, problem)
	}
	return ""
}

// callLog is an interval's syscall log. Its calls are kept without
// pointers, their outputs' bytes in slabs the log owns, so the garbage
// collector has nothing to scan in it: the hundreds of thousands of calls a
// busy interval logs (a quarter second of redis under load: 120,000), as
// format.Syscall records with their output lists, were most of what its
// background marking went through, a quarter of the recorder's CPU.
// Appending never moves a call, and one allocation serves thousands of
// calls. A call comes back out as a format.Syscall whose outputs alias the
// slabs: a log is never changed once its interval is closed.
type callLog struct {
	recs  [][]logRec // blocks of logBlock calls
	outs  [][]outRef // blocks of logBlock outputs
	nouts int
	slabs [][]byte // output bytes
	fill  int      // the slab being filled
	seen  *repeatCache
	n     int
	bytes int64 // memory held: blocks and slabs
}

// logRec is one call of a callLog; its outputs are outs [out, out+nout).
type logRec struct {
	Seq       uint64
	Args      [6]uint64
	Ret       int64
	Rip       uint64
	Tid, Nr   int32
	out, nout uint32
}

// outRef is one output of a call: n bytes at off in slab.
type outRef struct {
	Addr         uint64
	slab, off, n uint32
}

const (
	logBlock = 4096
	// logSlab is the size of the slabs output bytes are copied into; an
	// output over an eighth of it gets a slab of its own.
	logSlab = 256 << 10
)

func (l *callLog) append(rec format.Syscall) {
	if k := len(l.recs); k == 0 || len(l.recs[k-1]) == logBlock {
		l.recs = append(l.recs, make([]logRec, 0, logBlock))
		l.bytes += logBlock * int64(unsafe.Sizeof(logRec{}))
	}
	r := logRec{Seq: rec.Seq, Args: rec.Args, Ret: rec.Ret, Rip: rec.Rip, Tid: int32(rec.Tid), Nr: int32(rec.Nr),
		out: uint32(l.nouts), nout: uint32(len(rec.Out))}
	for j, o := range rec.Out {
		l.addOut(o, uint64(rec.Nr)<<40^rec.Args[0]<<8^uint64(j))
	}
	b := &l.recs[len(l.recs)-1]
	*b = append(*b, r)
	l.n++
}

// repeatCache remembers where the last output of a kind of call is (kind:
// its number, first argument and position), so that an output with the
// same bytes shares them: dd reading /dev/zero copied 512 zero bytes a call
// into its log, 50 MB a quarter second, which made its log outgrow the
// ring's budget every interval and the ring wait for a pack of it at every
// boundary, with dd stopped. A file read over and over, or epoll_wait
// reporting the same events, repeat the same way. One entry per slot of a
// small table, replaced by the kind that comes last: a miss only costs a
// copy, as before.
type repeatCache [256]repeatEntry

type repeatEntry struct {
	kind uint64
	ref  outRef
	set  bool
}

// repeatMin is the smallest output worth looking up: shorter ones cost
// less to copy than a slab reference.
const repeatMin = 64

// addOut copies one output into the log, unless it repeats the bytes of the
// last output of its kind.
func (l *callLog) addOut(o format.OutBuf, kind uint64) {
	if k := len(l.outs); k == 0 || len(l.outs[k-1]) == logBlock {
		l.outs = append(l.outs, make([]outRef, 0, logBlock))
		l.bytes += logBlock * int64(unsafe.Sizeof(outRef{}))
	}
	ref := outRef{Addr: o.Addr, n: uint32(len(o.Data))}
	var last *repeatEntry
	if len(o.Data) >= repeatMin {
		if l.seen == nil {
			l.seen = new(repeatCache)
		}
		last = &l.seen[(kind*0x9e3779b97f4a7c15)>>56]
		if last.set && last.kind == kind && last.ref.n == ref.n && bytes.Equal(l.data(last.ref), o.Data) {
			ref.slab, ref.off = last.ref.slab, last.ref.off
			l.addRef(ref)
			return
		}
	}
	if len(o.Data) > logSlab/8 {
		ref.slab = uint32(len(l.slabs))
		l.slabs = append(l.slabs, bytes.Clone(o.Data))
		l.bytes += int64(len(o.Data))
	} else {
		if l.slabs == nil || cap(l.slabs[l.fill])-len(l.slabs[l.fill]) < len(o.Data) {
			l.fill = len(l.slabs)
			l.slabs = append(l.slabs, make([]byte, 0, logSlab))
			l.bytes += logSlab
		}
		ref.slab, ref.off = uint32(l.fill), uint32(len(l.slabs[l.fill]))
		l.slabs[l.fill] = append(l.slabs[l.fill], o.Data...)
	}
	if last != nil {
		last.kind, last.ref, last.set = kind, ref, true
	}
	l.addRef(ref)
}

func (l *callLog) addRef(ref outRef) {
	b := &l.outs[len(l.outs)-1]
	*b = append(*b, ref)
	l.nouts++
}

// data returns the bytes of an output, aliasing its slab.
func (l *callLog) data(r outRef) []byte {
	return l.slabs[r.slab][r.off : r.off+r.n : r.off+r.n]
}

func (l *callLog) len() int { return l.n }

// out returns output i, aliasing its slab.
func (l *callLog) out(i uint32) format.OutBuf {
	r := l.outs[i/logBlock][i%logBlock]
	return format.OutBuf{Addr: r.Addr, Data: l.data(r)}
}

// record returns call r as a format.Syscall whose outputs are appended to
// outs, which must have room for them (they are a slice of it).
func (l *callLog) record(r *logRec, outs []format.OutBuf) (format.Syscall, []format.OutBuf) {
	rec := format.Syscall{Seq: r.Seq, Tid: int(r.Tid), Nr: int(r.Nr), Args: r.Args, Ret: r.Ret, Rip: r.Rip}
	if r.nout > 0 {
		start := len(outs)
		for i := r.out; i < r.out+r.nout; i++ {
			outs = append(outs, l.out(i))
		}
		rec.Out = outs[start:len(outs):len(outs)]
	}
	return rec, outs
}

// at returns the i-th call.
func (l *callLog) at(i int) *format.Syscall {
	r := &l.recs[i/logBlock][i%logBlock]
	rec, _ := l.record(r, make([]format.OutBuf, 0, r.nout))
	return &rec
}

// each yields the calls in order, every one in the same variable, which the
// next call overwrites: packing a log needs no record per call (making them a
// block at a time, then clearing and collecting them, was a third of what
// packing a quarter second of dd cost).
func (l *callLog) each() iter.Seq[*format.Syscall] {
	return func(yield func(*format.Syscall) bool) {
		var rec format.Syscall
		var outs []format.OutBuf
		for _, b := range l.recs {
			for i := range b {
				rec, outs = l.record(&b[i], outs[:0])
				if !yield(&rec) {
					return
				}
			}
		}
	}
}

// appendTo appends the calls to dst, their outputs in one list the log
// allocates for them all: a dump copies a window's calls (a million for a
// busy python3 loop) into its checkpoint this way, where records made a
// block at a time (all) and then copied doubled what it allocated.
func (l *callLog) appendTo(dst []format.Syscall) []format.Syscall {
	dst = slices.Grow(dst, l.n)
	outs := make([]format.OutBuf, 0, l.nouts)
	for _, b := range l.recs {
		for i := range b {
			var rec format.Syscall
			rec, outs = l.record(&b[i], outs)
			dst = append(dst, rec)
		}
	}
	return dst
}

// outputs yields the bytes of every output, in order.
func (l *callLog) outputs() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for i := 0; i < l.nouts; i++ {
			if !yield(l.out(uint32(i)).Data) {
				return
			}
		}
	}
}

// logPtraceSyscall builds the record of a call seen at its entry and exit
// stops, reading the memory the kernel wrote for it.
func (s *session) logPtraceSyscall(tid int, e *proc.SyscallInfo, x proc.SyscallInfo) {
	rec := format.Syscall{Tid: tid, Nr: int(e.Nr), Args: e.Args, Ret: x.Ret, Rip: x.Rip}
	restarted(&rec, s.restarts)
	d, ok := syscalls.Lookup(rec.Nr)
	if !ok || d.Kind == syscalls.Unsupported {
		s.appendSyscall(rec, "")
		return
	}
	read := func(addr uint64, n int) ([]byte, error) {
		b := make([]byte, n)
		got, err := proc.ReadBytes(s.pid, addr, b)
		if err != nil {
			return nil, err
		}
		return b[:got], nil
	}
	ranges, err := syscalls.Outputs(d, rec.Args, rec.Ret, read)
	if err != nil {
		s.appendSyscall(rec, fmt.Sprintf("outputs: %v", err))
		return
	}
	for _, r := range ranges {
		b, err := read(r.Addr, r.Len)
		if err != nil || len(b) != r.Len {
			s.appendSyscall(rec, fmt.Sprintf("cannot read its output at %#x", r.Addr))
			return
		}
		rec.Out = append(rec.Out, format.OutBuf{Addr: r.Addr, Data: b})
	}
	s.appendSyscall(rec, "")
}
