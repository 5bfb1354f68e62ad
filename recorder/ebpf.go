package recorder

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/tprec/tprec/bpf"
	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
)

// DefaultRingbufSize is the eBPF ring buffer size when none is given: large
// enough that a saturated 2-CPU machine loses nothing on the benchmark
// workloads (BENCHMARKS.md), small enough to be unremarkable next to the
// interval ring.
const DefaultRingbufSize = 64 << 20

// maxCapture is the most output memory the eBPF side copies for one
// syscall: a quarter of the ring buffer, at most 16 MiB (the programs copy
// up to 4,096 steps of at least a page, bpf/tprec.c TP_MAX_STEPS). A call
// that wrote more is logged without its data and its interval is marked
// not replayable, naming it. It was 1 MiB: python3 reading a file whole
// (one read(2) of its size), sort's 1.5 MB reads and a 4 MB getrandom made
// their intervals unreplayable under eBPF, not under ptrace. The reader
// drains the ring buffer while the programs copy, a call's data split in
// records of 32 KiB, so a call of a quarter of it fits beside the others.
func maxCapture(ringbufSize int) int {
	return min(16<<20, ringbufSize/4)
}

// pollPeriod is how often the reader looks at the ring buffer when the
// programs did not wake it (they wake it only when it is half full). Each
// look that finds the ring empty doubles the wait, up to idlePollPeriod,
// and one that finds records brings it back: a reader looking every 2 ms at
// an idle target woke 500 times a second for nothing, 60% of what tprec
// recording a sleeping process cost.
const (
	pollPeriod     = 2 * time.Millisecond
	idlePollPeriod = 64 * time.Millisecond
)

// ErrEBPFUnavailable wraps every reason the eBPF backend cannot run.
var ErrEBPFUnavailable = errors.New("eBPF backend unavailable")

// ebpfSource collects the syscall log from the eBPF programs of bpf/: the
// target runs without syscall stops; a reader goroutine decodes the ring
// buffer into per-call records, and sync hands them to the session in
// sequence order once everything the stopped target produced is read.
type ebpfSource struct {
	pid   int
	objs  bpf.TprecObjects
	links []link.Link
	ring  *ringReader
	logf  func(string, ...any)

	stats   io.Closer   // run-time statistics, with TPREC_DEBUG=bpfstats
	profile *os.File    // CPU profile of the recorder, with TPREC_CPUPROFILE
	cm      *clockMerge // the clock log's merge, nil without one
	// clockReads counts the entries of the clock logs merged, for the
	// summary at the end.
	clockReads uint64

	flushReq chan struct{} // a drain asks the reader to empty the ring
	low      lowered       // the reader's thread
	flushed  chan error    // one value per request, from the reader
	stop     atomic.Bool   // the reader returns at its next look
	done     chan struct{} // closed when the reader returns

	mu        sync.Mutex
	calls     map[uint64]*pendingCall // by sequence number, until complete
	log       *openLog                // the open interval's log, nil between intervals
	rec       record                  // the reader's decoded record, reused
	bld       builder                 // the reader's record builder
	built     format.Syscall          // the record it built last, reused
	faults    map[uint64]uint8        // page -> TP_FAULT_* flags, current epoch
	badRecs   int                     // records that did not decode
	firstBad  error
	readerErr error

	epoch uint64
	marks uint32 // SIGURGs of the programs taken (ownSignal), against tp_proc.marks
	held  struct {
		times int           // stops held for a crowded ring buffer (catchUp)
		total time.Duration // how long, in all
	}
	baseline bpf.TprecTpCounters
	misses   uint64 // recursion misses of the programs, last read

	// Cross-check of the fault stream against the pagemap written set.
	check struct {
		intervals, agree, onlyPagemap, onlyFaults int
	}
	faultSet map[uint64]uint8 // the closed interval's faults, for checkWritten
}

// pendingCall is one syscall whose record parts are being collected.
type pendingCall struct {
	hdr   bpf.TprecTpSyscall
	have  bool // the header part arrived
	end   bool // the last part arrived, and every part decoded
	last  bool // the last part arrived
	bad   bool // a part did not decode
	parts int
	items []item
}

// openLog is the syscall log of the open interval. The reader goroutine
// appends each call as its record completes, numbered and checked, while the
// target runs; a boundary only takes the log (sync), so the stop costs the
// same whatever the number of calls. Calls of one thread
// complete in sequence order (every part of a call is committed before the
// next call starts), so appending keeps the order; a call whose parts did
// not all arrive leaves a gap, which makes the interval not replayable.
type openLog struct {
	calls  callLog
	firstQ uint64 // eBPF sequence number of the interval's first call
	nextQ  uint64 // next eBPF sequence number expected
	delta  uint64 // log sequence number = eBPF sequence number - delta
	reason string // first reason the interval cannot be replayed
	mmaps  []int  // positions in calls of file mmaps, resolved at the boundary
	// dontFork: a call marked a range MADV_DONTFORK (dontForkCall).
	dontFork bool
	// memCalls are the positions of every call that mapped, unmapped or
	// moved memory: what resolveMmaps looks through after a file mmap.
	memCalls []int
	// restarts are the calls the interval started in that the kernel
	// resumes through restart_syscall (session.restarts at the open).
	restarts map[int]*proc.SyscallInfo
	early    map[uint64]earlyCall // calls that came before their turn (add)
	vforks   *vforkCaptures       // the session's, for calls that made a vfork child
	// cm merges the clock log's entries into the log (clocklog.go), nil
	// without one. seqOff is what the log's numbering has moved from the
	// calls' own: clock reads merged, less the calls dropped.
	cm     *clockMerge
	seqOff uint64
	// unsupported are the calls of the interval that no replay can make,
	// the first of each number (sayUnsupported).
	unsupported []*format.Syscall
}

func (l *openLog) fail(why string) {
	if l.reason == "" {
		l.reason = why
	}
}

// add appends the call with eBPF sequence number q. Calls of one thread
// complete in sequence order, but two threads' calls can reach the ring out
// of order (each takes its number at its exit, then reserves its record): a
// call that comes before its turn waits in early until the calls before it
// are in.
//
// With a clock log, clock is the counter the call read (clocklog.go): the
// entries below it are merged before the call, which waits in early until
// they are all there; fs is the calling thread's fs base.
func (l *openLog) add(q uint64, rec *format.Syscall, problem string, clock, fs uint64) {
	if q < l.nextQ {
		return // from before the interval, or the recorder's own injected call
	}
	drop := false
	if l.cm != nil {
		drop = l.cm.call(rec)
	}
	// What belongs to the thread (a restarted call, what its vfork child
	// wrote) is taken now: a thread's records arrive in its own order.
	// (With a clock log the number is final only once pushed.)
	rec.Seq = q - l.delta + l.seqOff
	restarted(rec, l.restarts)
	problem = l.vforks.replayProblem(rec, problem)
	if q > l.nextQ || !l.ready(clock) {
		if l.early == nil {
			l.early = map[uint64]earlyCall{}
		}
		c := earlyCall{*rec, problem, clock, fs, drop}
		c.rec.Out = ownOutputs(rec.Out) // they alias the builder's buffers
		l.early[q] = c
		return
	}
	l.push(rec, problem, fs, drop)
	l.flush()
}

// flush pushes the calls waiting in early that can go now.
func (l *openLog) flush() {
	for len(l.early) > 0 {
		c, ok := l.early[l.nextQ]
		if !ok || !l.ready(c.clock) {
			break
		}
		delete(l.early, l.nextQ)
		l.push(&c.rec, c.problem, c.fs, c.drop)
	}
}

// ready merges the clock log's entries below the counter a call read, and
// reports whether they all were there (an entry is stamped once written:
// a thread between the index it took and the stamp holds back the calls
// after it).
func (l *openLog) ready(clock uint64) bool {
	cm := l.cm
	if cm == nil || clock == clockNone {
		return true
	}
	if clock == clockUnread {
		l.fail("a call could not read the clock log's counter: where the clock reads around it go is unknown")
		return true
	}
	cm.g = max(cm.g, clock)
	return l.mergeClock(cm.g)
}

// mergeClock appends the clock log's entries up to index upTo (not
// included), and reports whether they all were there.
func (l *openLog) mergeClock(upTo uint64) bool {
	cm := l.cm
	for cm.next < upTo {
		en, ok := cm.l.entry(cm.next)
		if !ok {
			cm.l.consumed(cm.next)
			return false
		}
		why := cm.record(&en)
		cm.next++
		if why != "" {
			l.fail(why)
			continue
		}
		cm.rec.Seq = l.nextQ - l.delta + l.seqOff
		l.seqOff++
		l.calls.append(&cm.rec)
	}
	cm.l.consumed(cm.next)
	return true
}

// ownOutputs returns a copy of outs and of their bytes.
func ownOutputs(outs []format.OutBuf) []format.OutBuf {
	if len(outs) == 0 {
		return nil
	}
	own := make([]format.OutBuf, len(outs))
	for i, o := range outs {
		own[i] = format.OutBuf{Addr: o.Addr, Data: bytes.Clone(o.Data)}
	}
	return own
}

// earlyCall is a call that reached the ring before one numbered before it.
type earlyCall struct {
	rec     format.Syscall
	problem string
	clock   uint64 // the clock log's counter it read
	fs      uint64 // its thread's fs base
	drop    bool   // a clock read's own syscall inside the vDSO (clockMerge.call)
}

// push appends the call numbered nextQ; why is what makes its interval
// not replayable, if anything (replayProblem); fs is its thread's fs base,
// drop says it is a clock read's own syscall (earlyCall).
func (l *openLog) push(rec *format.Syscall, why string, fs uint64, drop bool) {
	rec.Seq = l.nextQ - l.delta + l.seqOff
	l.nextQ++
	if l.cm != nil {
		l.cm.thread(fs, rec.Tid)
	}
	if drop {
		l.seqOff--
		return
	}
	if why != "" {
		l.fail(why)
		if unsupportedNote(rec.Nr) != "" && !slices.ContainsFunc(l.unsupported, func(u *format.Syscall) bool { return u.Nr == rec.Nr }) {
			l.unsupported = append(l.unsupported, &format.Syscall{Nr: rec.Nr, Seq: rec.Seq})
		}
	}
	if format.FileMmap(rec) {
		l.mmaps = append(l.mmaps, l.calls.len())
	}
	if dontForkCall(rec) {
		l.dontFork = true
	}
	if _, n := format.MemoryChanges(rec); n > 0 {
		l.memCalls = append(l.memCalls, l.calls.len())
	}
	l.calls.append(rec)
}

// closeGaps is called once every record of the interval is in: calls still
// waiting for one numbered before them mean that one never arrived.
func (l *openLog) closeGaps() {
	// One sort: under heavy loss (a program that cannot be held for the
	// reader) there are thousands of gaps and tens of thousands of calls.
	for _, q := range slices.Sorted(maps.Keys(l.early)) {
		if q != l.nextQ {
			l.fail(fmt.Sprintf("eBPF syscall log has a gap: calls %d to %d are missing", l.nextQ-l.delta, q-1-l.delta))
			l.nextQ = q
		}
		c := l.early[q]
		if !l.ready(c.clock) {
			l.fail("clock reads logged before a call never got their entries")
		}
		l.push(&c.rec, c.problem, c.fs, c.drop)
	}
	l.early = nil
	if l.cm != nil && !l.mergeClock(l.cm.l.counter()) {
		l.fail("clock reads logged before the boundary never got their entries")
	}
}

// newEBPFSource loads and attaches the programs and starts recording the
// syscalls of pid. Its errors wrap ErrEBPFUnavailable and say why in one line.
func newEBPFSource(pid int, ringbufSize int, logf func(string, ...any)) (*ebpfSource, error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("%w: the kernel has no BTF (/sys/kernel/btf/vmlinux: %v); CO-RE programs need CONFIG_DEBUG_INFO_BTF", ErrEBPFUnavailable, err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%w: remove the memlock limit: %w", ErrEBPFUnavailable, err)
	}
	// A kernel locked down for confidentiality refuses helpers that read
	// kernel memory. cilium/ebpf probes for one of them, and when that
	// fails rewrites the programs' user-memory reads into the old generic
	// bpf_probe_read, which is refused too: say so, rather than the
	// verifier's "unknown func bpf_probe_read#4" (Linux 6.1 booted with
	// lockdown=confidentiality, by hand). Integrity, the level Secure Boot
	// sets, leaves the programs alone.
	if b, err := os.ReadFile("/sys/kernel/security/lockdown"); err == nil && strings.Contains(string(b), "[confidentiality]") {
		return nil, fmt.Errorf("%w: the kernel is locked down for confidentiality (/sys/kernel/security/lockdown), which refuses the programs' memory reads", ErrEBPFUnavailable)
	}
	// The programs walk records with bpf_loop (Linux 5.17): on an older
	// kernel, say that, rather than the verifier's first complaint about
	// them (Linux 5.10: "BPF_STX uses reserved fields").
	if err := features.HaveProgramHelper(ebpf.Kprobe, asm.FnLoop); err != nil {
		return nil, fmt.Errorf("%w: this kernel (%s) lacks the bpf_loop helper the programs use, which Linux 5.17 and later have: %w", ErrEBPFUnavailable, kernelRelease(), err)
	}
	spec, err := bpf.LoadTprec()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEBPFUnavailable, err)
	}
	if ringbufSize <= 0 {
		ringbufSize = DefaultRingbufSize
	}
	spec.Maps[bpf.TprecMapEvents].MaxEntries = uint32(ringbufPages(ringbufSize))
	if err := spec.Variables["ring_half"].Set(uint64(ringbufPages(ringbufSize) / 2)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEBPFUnavailable, err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEBPFUnavailable, err)
	}
	spec.Maps[bpf.TprecMapScratch].MaxEntries = uint32(ncpu)
	if err := spec.Variables["max_capture"].Set(uint32(maxCapture(ringbufSize))); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEBPFUnavailable, err)
	}
	e := &ebpfSource{pid: pid, logf: logf, flushReq: make(chan struct{}, 1), flushed: make(chan error, 1), done: make(chan struct{}),
		calls: map[uint64]*pendingCall{}, faults: map[uint64]uint8{}}
	if err := spec.LoadAndAssign(&e.objs, nil); err != nil {
		return nil, loadError(err)
	}
	for _, p := range []*ebpf.Program{e.objs.TpSysExit, e.objs.TpFaultUser, e.objs.TpFaultKernel, e.objs.TpFork, e.objs.TpExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			e.closeObjects()
			return nil, fmt.Errorf("%w: attach %s: %w", ErrEBPFUnavailable, p, err)
		}
		e.links = append(e.links, l)
	}
	if path := os.Getenv("TPREC_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			e.profile = f
		}
	}
	if os.Getenv("TPREC_DEBUG") == "bpfstats" {
		// Run time and run count per program, logged at close; the kernel
		// counts them only while someone asks (kernel/bpf/syscall.c:
		// bpf_enable_runtime_stats), and counting costs two clock reads per run.
		if st, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err == nil {
			e.stats = st
		} else {
			logf("bpf run-time statistics unavailable: %v", err)
		}
	}
	e.ring, err = newRingReader(e.objs.Events.FD(), int(e.objs.Events.MaxEntries()))
	if err != nil {
		e.closeObjects()
		return nil, fmt.Errorf("%w: ring buffer reader: %w", ErrEBPFUnavailable, err)
	}
	go e.read()
	if err := e.objs.Traced.Update(uint32(pid), bpf.TprecTpProc{Flags: uint32(bpf.TprecTpProcFlagsTP_PROC_URGE)}, ebpf.UpdateAny); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: trace process %d: %w", ErrEBPFUnavailable, pid, err)
	}
	if err := e.markTraced(pid, true); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: trace process %d: %w", ErrEBPFUnavailable, pid, err)
	}
	return e, nil
}

// markTraced sets or clears the bit of tgid in traced_bits, the programs'
// first filter. The read-modify-write is not atomic against the fork
// program, which sets a child's bit in the same word; it runs before the
// target has children and once it is no longer recorded.
func (e *ebpfSource) markTraced(tgid int, on bool) error {
	i := uint32(tgid / 64)
	var w uint64
	if err := e.objs.TracedBits.Lookup(i, &w); err != nil {
		return fmt.Errorf("pid %d beyond the traced bitmap: %w", tgid, err)
	}
	if on {
		w |= 1 << (tgid % 64)
	} else {
		w &^= 1 << (tgid % 64)
	}
	return e.objs.TracedBits.Update(i, w, ebpf.UpdateExist)
}

// ringbufPages rounds a size up to a power-of-two number of pages, as the
// kernel requires (kernel/bpf/ringbuf.c: ringbuf_map_alloc).
func ringbufPages(n int) int {
	size := os.Getpagesize()
	for size < n {
		size *= 2
	}
	return size
}

// loadError says in one line why the programs did not load.
func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		lines := ve.Log
		if len(lines) > 3 {
			lines = lines[len(lines)-3:]
		}
		return fmt.Errorf("%w: the kernel's verifier rejected the programs: %s", ErrEBPFUnavailable, strings.Join(lines, " | "))
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w: tprec needs CAP_BPF and CAP_PERFMON (or root) to load eBPF programs: run it with sudo, or use --backend ptrace", ErrEBPFUnavailable)
	}
	return fmt.Errorf("%w: load programs: %w", ErrEBPFUnavailable, err)
}

func (e *ebpfSource) name() string       { return "ebpf" }
func (e *ebpfSource) resumeRequest() int { return unix.PTRACE_CONT }

// read is the reader goroutine: it decodes every record into e.calls and
// e.faults, and answers each drain request once the ring buffer is empty.
// It takes e.mu for a bounded batch of records at a time, so a boundary
// waits for at most one batch.
func (e *ebpfSource) read() {
	defer close(e.done)
	// The reader's thread runs at SCHED_IDLE, raised when the target waits
	// for it (lowered). Locked and never unlocked: the thread ends with
	// the goroutine, its policy with it.
	runtime.LockOSThread()
	e.low.lower()
	const batch = 1024
	period := pollPeriod
	var pass schedPass
	for !e.stop.Load() {
		asked := false
		select {
		case <-e.flushReq:
			asked = true
		default:
		}
		n, err := e.drainRing(batch, asked)
		if n > 0 {
			period = pollPeriod
		} else {
			period = min(2*period, idlePollPeriod)
		}
		// Raised for a drain, or by the watchdog: the ring is empty again.
		e.low.lower()
		if asked {
			e.flushed <- err
		}
		if err != nil {
			e.mu.Lock()
			e.readerErr = err
			e.mu.Unlock()
			return
		}
		if !asked {
			if pass.due(period <= 2*pollPeriod, time.Now()) {
				runtime.Gosched()
			}
			// The programs send without waking the reader (unless the
			// ring is more than half full): look again soon.
			if err := e.ring.wait(period); err != nil {
				e.mu.Lock()
				e.readerErr = err
				e.mu.Unlock()
				return
			}
		}
	}
}

// schedPass takes a goroutine locked to its thread through the Go
// scheduler every few milliseconds while it is busy. The runtime's monitor
// thread (sysmon) takes the P of a goroutine it finds on the same
// scheduling tick for 10 ms, in a syscall or not, and each time it takes
// one it goes back to waking every 20 us for a while. The reader never
// parks: it drains, then waits in epoll_wait for 2 ms, again and again, so
// under a busy target it was taken about 80 times a second, the monitor
// woke 1,500-2,000 times a second instead of about 100, and those wakeups
// were a fifth of tprec's CPU under redis-server (BENCHMARKS.md, "The Go
// runtime's monitor"). A pass (runtime.Gosched) of a locked goroutine
// hands its P to another thread and back, two thread switches.
//
// Only in a streak of frequent looks (waits of at most 4 ms: records were
// found at that look or the one before): a pass of the only busy
// goroutine wakes the monitor from the deep sleep it takes while every P
// is idle, back to 20 us. With a pass at every look, a sleeping target
// cost tprec 5% of a CPU instead of 1.4%, and with a pass at every look
// that found records, a redis-server woken by its timer ten times a second
// 4.3-5.5% instead of 3.7-4.1. A reader waiting longer is taken in its
// epoll_wait anyway.
type schedPass struct {
	last time.Time // the last pass
	busy time.Time // the first look of the streak; zero after a longer wait
}

const schedPassEvery = 4 * time.Millisecond

// due notes a look at time now and whether the reader looks often (its
// next wait is short), and reports whether to pass: the streak is two
// schedPassEvery long and the last pass one old.
func (p *schedPass) due(often bool, now time.Time) bool {
	if !often {
		p.busy = time.Time{}
		return false
	}
	if p.busy.IsZero() {
		p.busy = now
	}
	if now.Sub(p.busy) < 2*schedPassEvery || now.Sub(p.last) < schedPassEvery {
		return false
	}
	p.last = now
	return true
}

// drainRing consumes every committed record, batch records per hold of e.mu,
// and returns how many. With all, it also waits for records still being
// written (another process's call in flight), up to a second: a drain must
// see everything.
func (e *ebpfSource) drainRing(batch int, all bool) (int, error) {
	deadline := time.Now().Add(time.Second)
	total := 0
	for {
		e.mu.Lock()
		n, err := e.ring.drain(batch, e.consume)
		e.mu.Unlock()
		total += n
		if err != nil {
			return total, err
		}
		if n == batch {
			continue
		}
		if !all || e.ring.pending() == 0 {
			return total, nil
		}
		if time.Now().After(deadline) {
			return total, errors.New("a ring buffer record stayed uncommitted for a second")
		}
		runtime.Gosched()
	}
}

// consume files one raw record, with e.mu held. Records of other processes
// (followed children) are dropped: only the target is recorded. A call whose
// record is complete is built at once (most calls fit in one part and never
// enter the pending map), so the work per call is done while the target
// runs. b aliases the ring buffer: whatever is kept is copied.
func (e *ebpfSource) consume(b []byte) {
	r := &e.rec
	err := r.decode(b)
	if err != nil {
		e.badRecs++
		if e.firstBad == nil {
			e.firstBad = err
		}
		// A header that decoded still counts: its call is then incomplete.
		if r.syscall == nil && r.part == nil {
			return
		}
	}
	switch {
	case r.fault != nil:
		if int(r.fault.Tgid) == e.pid && r.fault.Epoch == e.epoch {
			e.faults[r.fault.Addr] |= r.fault.Flags
		}
	case r.syscall != nil:
		if int(r.syscall.Tgid) != e.pid {
			return
		}
		if testHookSyscall != nil {
			testHookSyscall(r.syscall)
		}
		seq := r.syscall.Seq
		if err == nil && r.syscall.Flags&uint8(bpf.TprecTpRecFlagsTP_F_END) != 0 && e.calls[seq] == nil {
			// The whole call in one record: its items alias b, and
			// buildSyscall copies what it keeps.
			h := r.syscall
			problem := e.bld.build(h, r.items, true, &e.built)
			if e.log != nil {
				e.log.add(seq, &e.built, problem, h.Clock, h.Fs)
			}
			return
		}
		c := e.call(seq)
		c.hdr, c.have = *r.syscall, true
		e.addParts(c, r.syscall.Flags, r.items, err != nil)
		e.complete(seq, c)
	case r.part != nil:
		if int(r.part.Tgid) != e.pid {
			return
		}
		c := e.call(r.part.Seq)
		e.addParts(c, r.part.Flags, r.items, err != nil)
		e.complete(r.part.Seq, c)
	}
}

func (e *ebpfSource) call(seq uint64) *pendingCall {
	c := e.calls[seq]
	if c == nil {
		c = &pendingCall{}
		e.calls[seq] = c
	}
	return c
}

// addParts keeps the items of one part. Item data is copied: the reader
// reuses its buffer.
func (e *ebpfSource) addParts(c *pendingCall, flags uint8, items []item, bad bool) {
	c.parts++
	for _, it := range items {
		if it.data != nil {
			it.data = append([]byte(nil), it.data...)
		}
		c.items = append(c.items, it)
	}
	if bad {
		c.bad = true
	}
	if flags&uint8(bpf.TprecTpRecFlagsTP_F_END) != 0 {
		c.last = true
	}
	c.end = c.last && !c.bad
}

// complete builds a call once its header and its last part are in. A call
// that never completes is built at the next sync, as incomplete.
func (e *ebpfSource) complete(seq uint64, c *pendingCall) {
	if !c.have || !c.last {
		return
	}
	delete(e.calls, seq)
	problem := e.bld.build(&c.hdr, c.items, c.end, &e.built)
	if e.log != nil {
		e.log.add(seq, &e.built, problem, c.hdr.Clock, c.hdr.Fs)
	}
}

// drain returns once the reader has consumed every record committed before
// the call. The target is stopped, so nothing new of it can arrive.
func (e *ebpfSource) drain() error {
	e.low.hold()
	defer e.low.unhold()
	select {
	case e.flushReq <- struct{}{}:
	default: // a request is already waiting
	}
	e.ring.poke()
	select {
	case err := <-e.flushed:
		return err
	case <-e.done:
		e.mu.Lock()
		defer e.mu.Unlock()
		return fmt.Errorf("ring buffer reader stopped: %w", e.readerErr)
	case <-time.After(10 * time.Second):
		return errors.New("ring buffer not drained after 10s")
	}
}

// lastSeq returns the sequence number of the last call the process
// completed: the programs' counter (the process's traced entry), which the
// sys_exit program bumps before the call returns, in the log's numbering.
// The records themselves may still be in the ring buffer.
//
// With a clock log the clock reads logged before the stop come before it
// too, and the log's numbering is known only once the calls before them
// are in: the records are read first.
func (e *ebpfSource) lastSeq(s *session) (uint64, error) {
	var p bpf.TprecTpProc
	if err := e.objs.Traced.Lookup(uint32(e.pid), &p); err != nil {
		return 0, fmt.Errorf("read the process's eBPF state: %w", err)
	}
	if e.cm != nil {
		if _, err := e.drainRing(256, true); err != nil {
			return 0, err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.log
	if l == nil {
		return s.seq, nil
	}
	if e.cm != nil {
		upTo := e.cm.l.counter()
		// A call before the signal may wait for a clock read another
		// thread is still writing: a few microseconds.
		for try := 0; try < 1000; try++ {
			if l.flush(); l.nextQ > p.Seq {
				break
			}
			e.mu.Unlock()
			time.Sleep(10 * time.Microsecond)
			e.mu.Lock()
		}
		if l.nextQ <= p.Seq {
			l.fail("a signal came while calls before it waited for clock reads")
		} else {
			for try := 0; !l.mergeClock(max(e.cm.g, upTo)); try++ {
				if try == 1000 {
					l.fail("a signal came while a clock read before it was being logged")
					break
				}
				e.mu.Unlock()
				time.Sleep(10 * time.Microsecond)
				e.mu.Lock()
			}
			e.cm.g = max(e.cm.g, upTo)
		}
	}
	return p.Seq - l.delta + l.seqOff, nil
}

// dropClock stops merging a clock log: the process exec'd, or tprec
// detaches.
func (e *ebpfSource) dropClock() {
	var p bpf.TprecTpProc
	if err := e.objs.Traced.Lookup(uint32(e.pid), &p); err == nil && p.Clock != 0 {
		p.Clock = 0
		e.objs.Traced.Update(uint32(e.pid), p, ebpf.UpdateExist)
	}
	e.mu.Lock()
	if e.cm != nil {
		e.clockReads += e.cm.next - e.cm.first
	}
	e.cm = nil
	if e.log != nil {
		e.log.cm = nil
	}
	e.mu.Unlock()
}

// useClock merges the clock log l into the syscall log from the next
// interval on, and has the syscall program read its counter.
func (e *ebpfSource) useClock(l *clockLog) error {
	var p bpf.TprecTpProc
	if err := e.objs.Traced.Lookup(uint32(e.pid), &p); err != nil {
		return fmt.Errorf("read the process's eBPF state: %w", err)
	}
	p.Clock = l.base + clkCounter
	if err := e.objs.Traced.Update(uint32(e.pid), p, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("give the syscall program the clock log: %w", err)
	}
	e.mu.Lock()
	e.cm = &clockMerge{l: l, next: l.counter(), first: l.counter(), fsTid: map[uint64]int{}}
	e.mu.Unlock()
	return nil
}

// counters sums the per-CPU loss counters.
func (e *ebpfSource) counters() (bpf.TprecTpCounters, error) {
	var per []bpf.TprecTpCounters
	var sum bpf.TprecTpCounters
	if err := e.objs.Counters.Lookup(uint32(0), &per); err != nil {
		return sum, err
	}
	for _, c := range per {
		sum.LostRecords += c.LostRecords
		sum.LostFaults += c.LostFaults
		sum.ReadFailures += c.ReadFailures
		sum.TooBig += c.TooBig
		sum.NoEntry += c.NoEntry
	}
	return sum, nil
}

// recursionMisses counts the times the kernel skipped one of the programs
// because another BPF program was running on that CPU: a call or a fault
// missed as surely as one without room in the ring buffer.
func (e *ebpfSource) recursionMisses() uint64 {
	var n uint64
	for _, p := range []*ebpf.Program{e.objs.TpSysExit, e.objs.TpFaultUser, e.objs.TpFaultKernel} {
		if st, err := p.Stats(); err == nil {
			n += st.RecursionMisses
		}
	}
	return n
}

// losses returns what was lost since the last call, and moves the baseline.
func (e *ebpfSource) losses() (lostCalls, lostFaults uint64, err error) {
	c, err := e.counters()
	if err != nil {
		return 0, 0, fmt.Errorf("read loss counters: %w", err)
	}
	m := e.recursionMisses()
	lostCalls = c.LostRecords - e.baseline.LostRecords + (m - e.misses)
	lostFaults = c.LostFaults - e.baseline.LostFaults
	e.baseline, e.misses = c, m
	return lostCalls, lostFaults, nil
}

// activity counts the open interval's calls read so far, with those in
// parts and the records not read yet (one per 64 bytes of the ring buffer,
// a call's least), and the pages it wrote. A write of the kernel's to a
// page of own is not counted: the kernel updates a thread's rseq area
// (rseq(2)) each time the thread resumes, the boundary's own resume
// included, and such a page is in own.
func (e *ebpfSource) activity(own []uint64) (calls, pages int) {
	calls = int(min((e.ring.pending()+63)/64, 1<<30))
	e.mu.Lock()
	defer e.mu.Unlock()
	calls += len(e.calls) + e.badRecs
	if e.log != nil {
		calls += e.log.calls.len()
	}
	for addr, flags := range e.faults {
		if flags != uint8(bpf.TprecTpFaultFlagsTP_FAULT_WRITE|bpf.TprecTpFaultFlagsTP_FAULT_KERNEL) || !slices.Contains(own, addr) {
			pages++
		}
	}
	return calls, pages
}

// sync hands every call the stopped target completed to the session, in
// sequence order, and checks that nothing was lost.
func (e *ebpfSource) sync(s *session) error {
	t0 := time.Now()
	backlog := e.ring.pending()
	if err := e.drain(); err != nil {
		return err
	}
	t1 := time.Now()
	lostCalls, lostFaults, err := e.losses()
	if err != nil {
		return err
	}
	e.mu.Lock()
	l := e.log
	e.log = nil
	if l != nil {
		// Calls still in parts lost their last part, or their header.
		for seq, c := range e.calls {
			if seq < l.firstQ {
				continue
			}
			if c.have {
				l.fail(fmt.Sprintf("eBPF syscall record %d is incomplete: a part was lost", seq-l.delta))
			} else {
				l.fail(fmt.Sprintf("eBPF syscall record %d lost its header", seq-l.delta))
			}
		}
	}
	e.calls = map[uint64]*pendingCall{}
	e.faultSet, e.faults = e.faults, map[uint64]uint8{}
	bad, firstBad := e.badRecs, e.firstBad
	e.badRecs, e.firstBad = 0, nil
	e.mu.Unlock()

	if lostCalls+lostFaults > 0 {
		if s.cur != nil {
			s.cur.lost += lostCalls + lostFaults
		}
		msg := fmt.Sprintf("eBPF ring buffer lost %d syscall records and %d fault events in this interval (raise --ringbuf-size)", lostCalls, lostFaults)
		s.logf("%s", msg)
		if lostCalls > 0 {
			s.notReplayable(msg)
		}
	}
	if bad > 0 {
		s.notReplayable(fmt.Sprintf("%d eBPF records did not decode: %v", bad, firstBad))
	}
	if l != nil && s.cur != nil {
		// The interval's log is the reader's: nothing else appends to it.
		l.closeGaps()
		s.cur.syscalls = l.calls
		s.cur.pendingMmaps, s.cur.memCalls = l.mmaps, l.memCalls
		if l.dontFork {
			s.dontForkDue.Store(true)
		}
		if l.reason != "" {
			s.notReplayable(l.reason)
		}
		for _, rec := range l.unsupported {
			s.unsupported(rec)
		}
		if l.nextQ > l.firstQ || l.seqOff > 0 {
			s.seq = l.nextQ - 1 - l.delta + l.seqOff
		}
	}
	if debugStops {
		n := 0
		if l != nil {
			n = l.calls.len()
		}
		s.logf("ebpf sync: drain %v (%d bytes behind), %d calls taken over in %v", t1.Sub(t0).Round(time.Microsecond), backlog, n, time.Since(t1).Round(time.Microsecond))
		if l != nil && l.cm != nil {
			s.logf("clock log: %d reads merged so far, counter %d", l.cm.next, l.cm.l.counter())
		}
	}
	return nil
}

// builder builds log records for the reader, reusing its index of the
// captured memory and taking the copies of outputs from large blocks: most
// calls write a few hundred bytes, and one allocation per call is most of
// the reader's cost at a million calls a second.
type builder struct {
	mem capturedMem
	// outs is the output list of the record build returns, reused: the
	// record's outputs alias it and the captured bytes until the log copies
	// them (callLog.append), or add takes its own copy of a call that came
	// early.
	outs   []format.OutBuf
	ranges []syscalls.Range                         // AppendOutputs's list, reused
	read   func(addr uint64, n int) ([]byte, error) // mem.read, made once (a builder is never copied)
}

// build makes into rec the record of a call from its header h and items
// (end: every part arrived and decoded), and returns what makes the call
// not replayable, if anything.
func (bd *builder) build(h *bpf.TprecTpSyscall, items []item, end bool, rec *format.Syscall) string {
	*rec = format.Syscall{Tid: int(h.Tid), Nr: int(h.Nr), Args: h.Args, Ret: h.Ret, Rip: h.Rip}
	for _, it := range items {
		if it.kind == bpf.TprecTpItemKindTP_ITEM_RESTART {
			// restart_syscall finished a call interrupted with
			// ERESTART_RESTARTBLOCK: the program saw one call, the
			// interrupted one, and the log holds that (as logPtraceSyscall).
			rec.Nr, rec.Args = restartOf(it)
		}
	}
	if !end {
		return "its eBPF record is incomplete (a part was lost)"
	}
	d, ok := syscalls.Lookup(rec.Nr)
	if !ok || d.Kind == syscalls.Unsupported {
		return ""
	}
	mem := &bd.mem
	mem.reset(items)
	if bd.read == nil {
		bd.read = mem.read // one closure for every call: Outputs keeps it
	}
	ranges, err := syscalls.AppendOutputs(bd.ranges[:0], d, rec.Args, rec.Ret, bd.read)
	bd.ranges = ranges
	if err != nil {
		return fmt.Sprintf("outputs: %v", err)
	}
	if len(ranges) == 0 {
		return ""
	}
	rec.Out = bd.outs[:0]
	for _, r := range ranges {
		b, err := mem.read(r.Addr, r.Len)
		if err != nil {
			rec.Out = nil
			return err.Error()
		}
		rec.Out = append(rec.Out, format.OutBuf{Addr: r.Addr, Data: b})
	}
	bd.outs = rec.Out[:0]
	return ""
}

// opened is called when an interval has started, the target still stopped:
// the fault epoch moves on, and calls from before the interval (and the
// recorder's own injected ones) will be dropped by their sequence numbers,
// even those the reader has not consumed yet, so there is no need to wait
// for it here.
func (e *ebpfSource) opened(s *session) error {
	var p bpf.TprecTpProc
	if err := e.objs.Traced.Lookup(uint32(e.pid), &p); err != nil {
		return fmt.Errorf("read the process's eBPF state: %w", err)
	}
	p.Epoch++
	if err := e.objs.Traced.Update(uint32(e.pid), p, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("bump the fault epoch: %w", err)
	}
	if _, _, err := e.losses(); err != nil {
		return err
	}
	// A call the program was in when recording began returned
	// ERESTART_RESTARTBLOCK before the programs traced the process: the
	// sys_exit program then finds nothing to say which call restart_syscall
	// finishes, and logs it without the call's outputs (poll's revents).
	// Tell it what the stop showed; an entry of its own is newer.
	for tid, r := range s.restarts {
		entry := struct {
			Nr   int64
			Args [6]uint64
		}{int64(r.Nr), r.Args}
		if err := e.objs.Restarts.Update(uint32(tid), entry, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("note the call thread %d resumes: %w", tid, err)
		}
	}
	l := &openLog{firstQ: p.Seq + 1, nextQ: p.Seq + 1, restarts: s.restarts, vforks: &s.vforks, cm: e.cm}
	s.restarts = map[int]*proc.SyscallInfo{}
	if s.cur != nil {
		l.delta = l.firstQ - s.cur.meta.FirstSeq
		if e.cm != nil {
			// The threads as they stand: one may read the clock
			// before its first call of the interval.
			e.mu.Lock()
			for _, t := range s.cur.meta.Threads {
				e.cm.thread(t.Regs.FsBase, t.Tid)
			}
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	e.calls = map[uint64]*pendingCall{}
	e.faults = map[uint64]uint8{}
	e.epoch = p.Epoch
	e.log = l
	e.mu.Unlock()
	return nil
}

// ownSignal reports whether a SIGURG stop is the programs' own signal, after
// a file mmap or with the ring buffer crowded (urge in bpf/tprec.c): the
// programs count the ones they send, and every one sent and not yet seen
// here is the recorder's.
func (e *ebpfSource) ownSignal(sig int) bool {
	if sig != int(unix.SIGURG) {
		return false
	}
	var p bpf.TprecTpProc
	if err := e.objs.Traced.Lookup(uint32(e.pid), &p); err != nil || p.Marks == e.marks {
		return false
	}
	e.marks++
	return true
}

// catchUpLimit bounds one hold of catchUp: a reader that does not move in
// that time has stopped, which the next drain reports.
const catchUpLimit = 2 * time.Second

// catchUp runs at each of the programs' own signal stops. When the ring
// buffer is more than a quarter full, the programs sent the signal because
// the reader fell behind (urge in bpf/tprec.c): the thread is held until
// the reader has brought it down to a quarter, so a program that makes
// calls faster than the reader takes them slows down instead of losing
// records. Other threads run on, and get their own stop if they need one.
func (e *ebpfSource) catchUp() {
	size := e.ring.mask + 1
	if e.ring.pending() <= size/4 {
		return
	}
	t0 := time.Now()
	e.low.hold()
	defer e.low.unhold()
	e.ring.poke()
	for e.ring.pending() > size/4 && time.Since(t0) < catchUpLimit {
		select {
		case <-e.done:
			return
		case <-time.After(100 * time.Microsecond):
		}
	}
	e.held.times++
	e.held.total += time.Since(t0)
}

// watch raises the reader when the ring buffer is more than 1/16th
// full: lowered on a machine other work keeps busy, it could fall behind
// until the programs hold the target for it (catchUp). It then stays
// raised for starvedHold. It reports whether the ring holds records.
func (e *ebpfSource) watch() bool {
	n := e.ring.pending()
	if n > (e.ring.mask+1)/16 {
		e.low.rescue()
	}
	return n > 0
}

// heldFor reports the stops catchUp held and for how long in all.
func (e *ebpfSource) heldFor() (int, time.Duration) { return e.held.times, e.held.total }

// checkWritten compares the pages the fault stream saw written in the closed
// interval with the pagemap's written set (the authority for originals: it
// also sees writes that never fault). Disagreements are counted, shown with
// TPREC_DEBUG and summed up when recording ends.
func (e *ebpfSource) checkWritten(s *session, maps []format.Mapping, written, inPlace []uint64) {
	if len(s.ownWrites) > 0 {
		// tprec's own writes (the entry point's int3) fault nowhere.
		var theirs []uint64
		for _, a := range written {
			if !slices.Contains(s.ownWrites, a) {
				theirs = append(theirs, a)
			}
		}
		written = theirs
		s.ownWrites = nil
	}
	onlyPM, onlyF, agree := compareWritten(maps, written, inPlace, e.faultSet)
	e.check.intervals++
	e.check.agree += agree
	e.check.onlyPagemap += len(onlyPM)
	e.check.onlyFaults += len(onlyF)
	if debugStops {
		s.logf("fault stream vs pagemap: %d agree, %d only in pagemap, %d only in faults", agree, len(onlyPM), len(onlyF))
	}
	if testHookWritten != nil {
		testHookWritten(maps, written, inPlace, e.faultSet)
	}
}

// testHookSyscall, set by tests, sees the header of every call of the
// recorded process, with the reader's lock held.
var testHookSyscall func(*bpf.TprecTpSyscall)

// testHookWritten, set by tests, sees every interval's two written sets.
var testHookWritten func(maps []format.Mapping, pagemap, inPlace []uint64, faults map[uint64]uint8)

// compareWritten splits the written pages of private, recorded mappings
// that existed at the interval start into those both methods found, those
// only the pagemap found (writes that do not fault: process_vm_writev,
// O_DIRECT) and those only a write fault reported. A page of inPlace (written
// in place, without a fault) that did not fault is in neither.
func compareWritten(maps []format.Mapping, written, inPlace []uint64, faults map[uint64]uint8) (onlyPagemap, onlyFaults []uint64, agree int) {
	in := func(a uint64) bool {
		i := sort.Search(len(maps), func(i int) bool { return maps[i].End > a })
		return i < len(maps) && maps[i].Start <= a && !maps[i].Shared
	}
	pm := make(map[uint64]bool, len(written))
	for _, a := range written {
		pm[a] = true
		if faults[a]&uint8(bpf.TprecTpFaultFlagsTP_FAULT_WRITE) != 0 {
			agree++
		} else if _, ok := slices.BinarySearch(inPlace, a); !ok {
			onlyPagemap = append(onlyPagemap, a)
		}
	}
	for a, f := range faults {
		if f&uint8(bpf.TprecTpFaultFlagsTP_FAULT_WRITE) != 0 && !pm[a] && in(a) {
			onlyFaults = append(onlyFaults, a)
		}
	}
	sort.Slice(onlyFaults, func(i, j int) bool { return onlyFaults[i] < onlyFaults[j] })
	return onlyPagemap, onlyFaults, agree
}

func (e *ebpfSource) close() {
	if e.ring != nil {
		e.objs.Traced.Delete(uint32(e.pid))
		e.markTraced(e.pid, false)
		e.stop.Store(true)
		e.low.raise()
		e.ring.poke()
		<-e.done
		e.ring.close()
		e.ring = nil
	}
	if n := e.low.rescued(); n > 0 && debugStops {
		e.logf("ring buffer reader raised %d times after waiting for a CPU", n)
	}
	if e.held.times > 0 {
		e.logf("held the process %d times, %v in all, for the ring buffer reader to catch up", e.held.times, e.held.total.Round(time.Millisecond))
	}
	if e.cm != nil {
		e.clockReads += e.cm.next - e.cm.first
		e.cm = nil
	}
	if e.clockReads > 0 {
		e.logf("%d clock reads recorded in the process without a syscall (clock log)", e.clockReads)
	}
	if e.check.intervals > 0 {
		e.logf("fault stream vs pagemap over %d intervals: %d written pages agree, %d only in pagemap (writes without a fault), %d only in faults",
			e.check.intervals, e.check.agree, e.check.onlyPagemap, e.check.onlyFaults)
	}
	e.closeObjects()
}

// logStats logs what each program cost, with TPREC_DEBUG=bpfstats.
func (e *ebpfSource) logStats() {
	for _, p := range []*ebpf.Program{e.objs.TpSysExit, e.objs.TpFaultUser, e.objs.TpFaultKernel, e.objs.TpFork, e.objs.TpExit} {
		if p == nil {
			continue
		}
		st, err := p.Stats()
		if err != nil || st.RunCount == 0 {
			continue
		}
		e.logf("bpf %s: %d runs, %d ns per run, %d recursion misses", p, st.RunCount, st.Runtime.Nanoseconds()/int64(st.RunCount), st.RecursionMisses)
	}
}

func (e *ebpfSource) closeObjects() {
	if e.profile != nil {
		pprof.StopCPUProfile()
		e.profile.Close()
		e.profile = nil
	}
	if e.stats != nil {
		e.logStats()
		e.stats.Close()
		e.stats = nil
	}
	for i := len(e.links) - 1; i >= 0; i-- {
		e.links[i].Close()
	}
	e.links = nil
	e.objs.Close()
}
