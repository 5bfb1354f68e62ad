package recorder

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/s2"
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
	// watch runs every watchPeriod while recording (session.watchdog), or
	// less often while it reports that there is nothing to watch.
	watch() (busy bool)
	// heldFor reports how many stops catchUp held, and for how long.
	heldFor() (int, time.Duration)
	// opened is called when an interval has started, the target still
	// stopped (after the recorder's own injected calls).
	opened(s *session) error
	// checkWritten sees the pagemap's written set of the interval that
	// sync closed, over the mappings present at its start, and those of
	// its pages the target may have written in place, without a fault (a
	// kept shadow's diverged pages, kept.go).
	checkWritten(s *session, maps []format.Mapping, written, inPlace []uint64)
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

func (ptraceSource) name() string                                                { return "ptrace" }
func (ptraceSource) resumeRequest() int                                          { return unix.PTRACE_SYSCALL }
func (ptraceSource) sync(s *session) error                                       { return nil }
func (ptraceSource) opened(s *session) error                                     { return nil }
func (ptraceSource) ownSignal(sig int) bool                                      { return false }
func (ptraceSource) catchUp()                                                    {}
func (ptraceSource) watch() bool                                                 { return false }
func (ptraceSource) heldFor() (int, time.Duration)                               { return 0, 0 }
func (ptraceSource) close()                                                      {}
func (ptraceSource) checkWritten(*session, []format.Mapping, []uint64, []uint64) {}
func (ptraceSource) lastSeq(s *session) (uint64, error)                          { return s.seq, nil }

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
		s.unsupported(&rec)
	}
	s.noteMmap(&rec)
	if dontForkCall(&rec) {
		s.dontForkDue.Store(true)
	}
	if _, n := format.MemoryChanges(&rec); n > 0 {
		s.cur.memCalls = append(s.cur.memCalls, s.cur.syscalls.len())
	}
	s.cur.syscalls.append(&rec)
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

// unsupportedNote says why no replay can make call nr, whatever its
// arguments: it is outside the syscall table or marked Unsupported there
// (io_uring, Linux AIO, ptrace). It is "" for any other call.
func unsupportedNote(nr int) string {
	d, ok := syscalls.Lookup(nr)
	switch {
	case !ok:
		return "not in tprec's syscall table"
	case d.Kind == syscalls.Unsupported:
		return d.Note
	}
	return ""
}

// unsupported notes rec for sayUnsupported when no replay can make its
// call; the first of each number only.
func (s *session) unsupported(rec *format.Syscall) {
	if unsupportedNote(rec.Nr) == "" || s.saidUnsupported[rec.Nr] {
		return
	}
	if s.saidUnsupported == nil {
		s.saidUnsupported = map[int]bool{}
	}
	s.saidUnsupported[rec.Nr] = true
	s.newUnsupported = append(s.newUnsupported, format.Syscall{Nr: rec.Nr, Seq: rec.Seq})
}

// sayUnsupported says, as the interval closes, which calls no replay can
// make the process made for the first time in it: intervals holding them
// cannot be replayed. A server doing its I/O through io_uring (fio's
// io_uring and libaio engines) was recorded for as long as one liked,
// silently, and every checkpoint had no replayable interval.
func (s *session) sayUnsupported() {
	if len(s.newUnsupported) == 0 {
		return
	}
	// The calls by reason, in the order the reasons first came.
	var whys []string
	calls := map[string][]string{}
	for _, rec := range s.newUnsupported {
		why := unsupportedNote(rec.Nr)
		if calls[why] == nil {
			whys = append(whys, why)
		}
		calls[why] = append(calls[why], fmt.Sprintf("%s (seq %d)", syscalls.Name(rec.Nr), rec.Seq))
	}
	s.newUnsupported = nil
	for i, why := range whys {
		whys[i] = strings.Join(calls[why], ", ") + ": " + why
	}
	s.logf("process %d made calls no replay can make: %s. An interval holding one can neither start a replay nor be run through by one; tprec records on, and says this once per call", s.pid, strings.Join(whys, "; "))
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

// callLog is an interval's syscall log. Its calls are kept encoded in large
// byte chunks the log owns, outputs inline after their call, so the garbage
// collector has nothing to scan in it and one allocation serves thousands
// of calls: the hundreds of thousands of calls a busy interval logs (a
// quarter second of redis under load: 120,000), as format.Syscall records
// with their output lists, were most of what its background marking went
// through. The encoding is a short one (varints, the arguments that are not
// zero, the return address as an index into a table of the log's), because
// the ring holds the log of several intervals within --max-memory: at 88
// bytes of fixed record and 24 of output reference a call, redis's intervals
// outgrew the budget and the ring packed every one of them
// (then with the checkpoint's encoding), a quarter of the recorder's CPU
// under that load.
// Appending never moves a call. A call comes back out as a format.Syscall
// whose outputs alias the chunks: a log is never changed once its interval
// is closed.
type callLog struct {
	chunks [][]byte  // encoded calls; a call never spans two
	marks  []logMark // the decoder's state before call k*logBlock
	rips   []uint64  // the return addresses the calls name by index
	ripIdx map[uint64]uint32
	seen   *repeatCache
	last   logState // the encoder's state: the last call appended
	n      int
	nouts  int
	out    int64 // the outputs' bytes, as the calls returned them
	bytes  int64 // memory held: chunks and tables
}

// logState is what a call's encoding is relative to: the call before it.
type logState struct {
	seq uint64
	tid int32
}

// logMark is where a call starts, and the state its decoding needs.
type logMark struct {
	chunk, off uint32
	state      logState
}

// outRef is one output's bytes: n at off in chunk.
type outRef struct {
	chunk, off, n uint32
}

const (
	// logBlock is the number of calls between two marks: at decodes at
	// most that many to find one.
	logBlock = 64
	// logChunk is the size of the chunks calls are encoded into; a call
	// with more output bytes gets a chunk of its own size.
	logChunk = 256 << 10
	// logCallMax bounds a call's encoding without its output bytes: the
	// flags, 9 varints of at most 10 bytes and the argument mask.
	logCallMax = 2 + 10*10
	// logOutMax bounds an output's encoding without its bytes.
	logOutMax = 1 + 3*10
)

// Flags of a call's first byte.
const (
	logSeqDelta = 1 << iota // the sequence number is not the last one + 1: a varint follows
	logTid                  // the thread is not the last call's: a varint follows
	logOutputs              // outputs follow
)

// Where an output's address is relative to: the argument of that index,
// else logOutAbs (the address itself).
const logOutAbs = 6

func (l *callLog) append(rec *format.Syscall) {
	if l.n%logBlock == 0 {
		l.room(logCallMax)
		k := len(l.chunks) - 1
		l.marks = append(l.marks, logMark{uint32(k), uint32(len(l.chunks[k])), l.last})
	}
	need := logCallMax + len(rec.Out)*logOutMax
	for _, o := range rec.Out {
		need += len(o.Data)
		l.out += int64(len(o.Data))
	}
	l.room(need)
	k := len(l.chunks) - 1
	b := l.chunks[k]
	var flags byte
	if rec.Seq != l.last.seq+1 {
		flags |= logSeqDelta
	}
	if int32(rec.Tid) != l.last.tid {
		flags |= logTid
	}
	if len(rec.Out) > 0 {
		flags |= logOutputs
	}
	b = append(b, flags)
	if flags&logSeqDelta != 0 {
		b = binary.AppendUvarint(b, rec.Seq-l.last.seq)
	}
	if flags&logTid != 0 {
		b = binary.AppendVarint(b, int64(int32(rec.Tid)))
	}
	b = binary.AppendVarint(b, int64(int32(rec.Nr)))
	var mask byte
	for i, a := range rec.Args {
		if a != 0 {
			mask |= 1 << i
		}
	}
	b = append(b, mask)
	for _, a := range rec.Args {
		if a != 0 {
			b = binary.AppendUvarint(b, a)
		}
	}
	b = binary.AppendVarint(b, rec.Ret)
	b = binary.AppendUvarint(b, uint64(l.ripIndex(rec.Rip)))
	if len(rec.Out) > 0 {
		b = binary.AppendUvarint(b, uint64(len(rec.Out)))
		for j, o := range rec.Out {
			b = l.appendOut(b, uint32(k), o, &rec.Args, uint64(rec.Nr)<<40^rec.Args[0]<<8^uint64(j))
		}
		l.nouts += len(rec.Out)
	}
	l.chunks[k] = b
	l.last = logState{rec.Seq, int32(rec.Tid)}
	l.n++
}

// room makes sure the last chunk has need bytes free.
func (l *callLog) room(need int) {
	if k := len(l.chunks); k > 0 && cap(l.chunks[k-1])-len(l.chunks[k-1]) >= need {
		return
	}
	size := max(logChunk, need)
	l.chunks = append(l.chunks, make([]byte, 0, size))
	l.bytes += int64(size)
}

// ripIndex returns the index of a return address in the log's table.
func (l *callLog) ripIndex(rip uint64) uint32 {
	if i, ok := l.ripIdx[rip]; ok {
		return i
	}
	if l.ripIdx == nil {
		l.ripIdx = map[uint64]uint32{}
	}
	i := uint32(len(l.rips))
	l.rips = append(l.rips, rip)
	l.ripIdx[rip] = i
	l.bytes += 32
	return i
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
// less to copy than a reference.
const repeatMin = 64

// appendOut encodes one output of a call into b, the end of chunk k: its
// address relative to the argument nearest to it, its length, and its
// bytes, unless they repeat those of the last output of its kind (then
// where those are).
func (l *callLog) appendOut(b []byte, k uint32, o format.OutBuf, args *[6]uint64, kind uint64) []byte {
	sel, dist := byte(logOutAbs), o.Addr
	for i, a := range args {
		if d := o.Addr - a; a != 0 && zigzag(d) < dist {
			sel, dist = byte(i), zigzag(d)
		}
	}
	b = append(b, sel)
	b = binary.AppendUvarint(b, dist)
	n := uint32(len(o.Data))
	var last *repeatEntry
	if n >= repeatMin {
		if l.seen == nil {
			l.seen = new(repeatCache)
		}
		last = &l.seen[(kind*0x9e3779b97f4a7c15)>>56]
		if last.set && last.kind == kind && last.ref.n == n && bytes.Equal(l.data(last.ref), o.Data) {
			b = binary.AppendUvarint(b, uint64(n)<<1|1)
			b = binary.AppendUvarint(b, uint64(last.ref.chunk))
			return binary.AppendUvarint(b, uint64(last.ref.off))
		}
	}
	b = binary.AppendUvarint(b, uint64(n)<<1)
	if last != nil {
		last.kind, last.ref, last.set = kind, outRef{k, uint32(len(b)), n}, true
	}
	return append(b, o.Data...)
}

// zigzag maps a signed distance to an unsigned one, small for small
// distances either way.
func zigzag(d uint64) uint64 { return d<<1 ^ uint64(int64(d)>>63) }

// data returns the bytes of an output, aliasing its chunk.
func (l *callLog) data(r outRef) []byte {
	return l.chunks[r.chunk][r.off : r.off+r.n : r.off+r.n]
}

func (l *callLog) len() int { return l.n }

// logReader decodes the calls of a log in order from a mark.
type logReader struct {
	l          *callLog
	chunk, off int
	state      logState
}

func (l *callLog) readerAt(m logMark) logReader {
	return logReader{l: l, chunk: int(m.chunk), off: int(m.off), state: m.state}
}

// next decodes the next call, its outputs appended to outs (which they are
// a slice of).
func (r *logReader) next(outs []format.OutBuf) (format.Syscall, []format.OutBuf) {
	b := r.l.chunks[r.chunk]
	if r.off == len(b) {
		r.chunk, r.off = r.chunk+1, 0
		b = r.l.chunks[r.chunk]
	}
	i := r.off
	uv := func() uint64 {
		v, n := binary.Uvarint(b[i:])
		i += n
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(b[i:])
		i += n
		return v
	}
	flags := b[i]
	i++
	rec := format.Syscall{Seq: r.state.seq + 1, Tid: int(r.state.tid)}
	if flags&logSeqDelta != 0 {
		rec.Seq = r.state.seq + uv()
	}
	if flags&logTid != 0 {
		rec.Tid = int(sv())
	}
	rec.Nr = int(sv())
	mask := b[i]
	i++
	for k := range rec.Args {
		if mask&(1<<k) != 0 {
			rec.Args[k] = uv()
		}
	}
	rec.Ret = sv()
	rec.Rip = r.l.rips[uv()]
	if flags&logOutputs != 0 {
		nout := int(uv())
		start := len(outs)
		for range nout {
			sel := b[i]
			i++
			var o format.OutBuf
			if d := uv(); sel == logOutAbs {
				o.Addr = d
			} else {
				o.Addr = rec.Args[sel] + uint64(int64(d>>1)^-int64(d&1))
			}
			ln := uv()
			n := uint32(ln >> 1)
			if ln&1 != 0 {
				ch := uint32(uv())
				off := uint32(uv())
				o.Data = r.l.data(outRef{ch, off, n})
			} else {
				o.Data = b[i : i+int(n) : i+int(n)]
				i += int(n)
			}
			outs = append(outs, o)
		}
		rec.Out = outs[start:len(outs):len(outs)]
	}
	r.off = i
	r.state = logState{rec.Seq, int32(rec.Tid)}
	return rec, outs
}

// at returns the i-th call.
func (l *callLog) at(i int) *format.Syscall {
	r := l.readerAt(l.marks[i/logBlock])
	var rec format.Syscall
	for range i%logBlock + 1 {
		rec, _ = r.next(nil)
	}
	return &rec
}

// each yields the calls in order, every one in the same variable, which the
// next call overwrites: packing a log needs no record per call (making them a
// block at a time, then clearing and collecting them, was a third of what
// packing a quarter second of dd cost).
func (l *callLog) each() iter.Seq[*format.Syscall] {
	return func(yield func(*format.Syscall) bool) {
		if l.n == 0 {
			return
		}
		r := l.readerAt(l.marks[0])
		var rec format.Syscall
		var outs []format.OutBuf
		for range l.n {
			rec, outs = r.next(outs[:0])
			if !yield(&rec) {
				return
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
	if l.n == 0 {
		return dst
	}
	outs := make([]format.OutBuf, 0, l.nouts)
	r := l.readerAt(l.marks[0])
	for range l.n {
		var rec format.Syscall
		rec, outs = r.next(outs)
		dst = append(dst, rec)
	}
	return dst
}

// packedLog is a closed interval's call log with its chunks compressed
// with s2, kept so when the ring runs short of memory (ring.budget); its
// marks and tables stay as they were. Until 2026-12-02 a packed log was
// the checkpoint's SYSCL encoding compressed with lz4: a third smaller
// for a redis-server interval (311 KB against 549 for 90,000 calls), but
// seven times the CPU (28 ms against 4), and under redis-server with
// --max-memory 32M, where the ring packs every interval, it was a tenth of
// a CPU. Unpacking gives the log back as it was.
type packedLog struct {
	log   callLog // chunks: the compressed chunks
	sizes []int   // each chunk's length before compression
	bytes int64   // memory held: the compressed chunks and the tables
}

// pack returns the log with its chunks compressed. The log must not grow
// afterwards (its interval is closed).
func (l *callLog) pack() *packedLog {
	p := &packedLog{log: *l, sizes: make([]int, len(l.chunks))}
	p.log.chunks = make([][]byte, len(l.chunks))
	p.log.seen = nil // only appending looks at it
	p.bytes = l.bytes
	var scratch []byte
	for i, c := range l.chunks {
		// Encoded into a buffer of the worst case, then copied: kept,
		// that buffer held seven times what the ring counted, and the
		// heap ran at the memory limit (a collection every 30 ms).
		if n := s2.MaxEncodedLen(len(c)); cap(scratch) < n {
			scratch = make([]byte, n)
		}
		z := bytes.Clone(s2.Encode(scratch[:cap(scratch)], c))
		p.log.chunks[i], p.sizes[i] = z, len(c)
		p.bytes += int64(len(z)) - int64(cap(c))
	}
	return p
}

// unpack returns the log that was packed.
func (p *packedLog) unpack() (callLog, error) {
	l := p.log
	l.chunks = make([][]byte, len(p.log.chunks))
	for i, z := range p.log.chunks {
		b, err := s2.Decode(make([]byte, p.sizes[i]), z)
		if err != nil || len(b) != p.sizes[i] {
			return callLog{}, fmt.Errorf("chunk %d of %d: %d bytes of %d, %v", i, len(p.log.chunks), len(b), p.sizes[i], err)
		}
		l.chunks[i] = b
	}
	return l, nil
}

// outputs yields the bytes of every output, in order.
func (l *callLog) outputs() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for rec := range l.each() {
			for _, o := range rec.Out {
				if !yield(o.Data) {
					return
				}
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
