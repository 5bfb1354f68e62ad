package recorder

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/tprec/tprec/bpf"
	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/syscalls"
)

// DefaultRingbufSize is the eBPF ring buffer size when none is given: large
// enough that a saturated 2-CPU machine loses nothing on the benchmark
// workloads (BENCHMARKS.md), small enough to be unremarkable next to the
// interval ring.
const DefaultRingbufSize = 64 << 20

// MaxCapture is the most output memory the eBPF side copies for one syscall.
// A call that wrote more is logged without its data and its interval is
// marked not replayable, naming it.
const MaxCapture = 1 << 20

// pollPeriod is how often the reader looks at the ring buffer when the
// programs did not wake it (they wake it only when it is half full).
const pollPeriod = 2 * time.Millisecond

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
	rd    *ringbuf.Reader
	logf  func(string, ...any)

	flushed chan error    // one value per Flush, from the reader
	done    chan struct{} // closed when the reader returns

	mu        sync.Mutex
	calls     map[uint64]*pendingCall // by sequence number
	faults    map[uint64]uint8        // page -> TP_FAULT_* flags, current epoch
	badRecs   int                     // records that did not decode
	firstBad  error
	readerErr error

	epoch    uint64
	nextSeq  uint64 // first sequence number not yet handed over
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
	end   bool // the last part arrived
	parts int
	items []item
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
	spec, err := bpf.LoadTprec()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEBPFUnavailable, err)
	}
	if ringbufSize <= 0 {
		ringbufSize = DefaultRingbufSize
	}
	spec.Maps[bpf.TprecMapEvents].MaxEntries = uint32(ringbufPages(ringbufSize))
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEBPFUnavailable, err)
	}
	spec.Maps[bpf.TprecMapScratch].MaxEntries = uint32(ncpu)
	if err := spec.Variables["max_capture"].Set(uint32(MaxCapture)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEBPFUnavailable, err)
	}
	e := &ebpfSource{pid: pid, logf: logf, flushed: make(chan error, 1), done: make(chan struct{}),
		calls: map[uint64]*pendingCall{}, faults: map[uint64]uint8{}}
	if err := spec.LoadAndAssign(&e.objs, nil); err != nil {
		return nil, loadError(err)
	}
	for _, p := range []*ebpf.Program{e.objs.TpSysEnter, e.objs.TpSysExit, e.objs.TpFaultUser, e.objs.TpFaultKernel, e.objs.TpFork, e.objs.TpExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			e.closeObjects()
			return nil, fmt.Errorf("%w: attach %s: %w", ErrEBPFUnavailable, p, err)
		}
		e.links = append(e.links, l)
	}
	e.rd, err = ringbuf.NewReader(e.objs.Events)
	if err != nil {
		e.closeObjects()
		return nil, fmt.Errorf("%w: ring buffer reader: %w", ErrEBPFUnavailable, err)
	}
	go e.read()
	if err := e.objs.Traced.Update(uint32(pid), bpf.TprecTpProc{}, ebpf.UpdateAny); err != nil {
		e.close()
		return nil, fmt.Errorf("%w: trace process %d: %w", ErrEBPFUnavailable, pid, err)
	}
	return e, nil
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
// e.faults, and answers each Flush once the ring buffer is empty.
func (e *ebpfSource) read() {
	defer close(e.done)
	var rec ringbuf.Record
	e.rd.SetDeadline(time.Now().Add(pollPeriod))
	for {
		err := e.rd.ReadInto(&rec)
		switch {
		case err == nil:
			e.consume(rec.RawSample)
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The programs send without waking the reader: look again soon.
			e.rd.SetDeadline(time.Now().Add(pollPeriod))
		case errors.Is(err, ringbuf.ErrFlushed):
			e.flushed <- nil
		case errors.Is(err, ringbuf.ErrClosed), errors.Is(err, os.ErrClosed):
			return
		default:
			e.mu.Lock()
			e.readerErr = err
			e.mu.Unlock()
			select {
			case e.flushed <- err:
			default:
			}
			return
		}
	}
}

// consume files one raw record. Records of other processes (followed
// children) are dropped: only the target is recorded.
func (e *ebpfSource) consume(b []byte) {
	r, err := decodeRecord(b)
	e.mu.Lock()
	defer e.mu.Unlock()
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
		c := e.call(r.syscall.Seq)
		c.hdr, c.have = *r.syscall, true
		e.addParts(c, r.syscall.Flags, r.items)
		if err != nil {
			c.end = false
		}
	case r.part != nil:
		if int(r.part.Tgid) != e.pid {
			return
		}
		c := e.call(r.part.Seq)
		e.addParts(c, r.part.Flags, r.items)
		if err != nil {
			c.end = false
		}
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
func (e *ebpfSource) addParts(c *pendingCall, flags uint8, items []item) {
	c.parts++
	for _, it := range items {
		if it.data != nil {
			it.data = append([]byte(nil), it.data...)
		}
		c.items = append(c.items, it)
	}
	if flags&uint8(bpf.TprecTpRecFlagsTP_F_END) != 0 {
		c.end = true
	}
}

// drain returns once the reader has consumed every record committed before
// the call. The target is stopped, so nothing new of it can arrive.
func (e *ebpfSource) drain() error {
	if err := e.rd.Flush(); err != nil {
		return fmt.Errorf("flush ring buffer: %w", err)
	}
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
	for _, p := range []*ebpf.Program{e.objs.TpSysEnter, e.objs.TpSysExit, e.objs.TpFaultUser, e.objs.TpFaultKernel} {
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

// sync hands every call the stopped target completed to the session, in
// sequence order, and checks that nothing was lost.
func (e *ebpfSource) sync(s *session) error {
	if err := e.drain(); err != nil {
		return err
	}
	lostCalls, lostFaults, err := e.losses()
	if err != nil {
		return err
	}
	e.mu.Lock()
	calls := e.calls
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
	seqs := make([]uint64, 0, len(calls))
	for q := range calls {
		seqs = append(seqs, q)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, q := range seqs {
		c := calls[q]
		if q < e.nextSeq {
			continue // an injected call or one from before the interval
		}
		if q > e.nextSeq && s.cur != nil {
			s.notReplayable(fmt.Sprintf("eBPF syscall log has a gap: calls %d to %d are missing", e.nextSeq, q-1))
		}
		e.nextSeq = q + 1
		if !c.have {
			s.notReplayable(fmt.Sprintf("eBPF syscall record %d lost its header", q))
			continue
		}
		rec, problem := buildSyscall(c)
		s.appendSyscall(rec, problem)
	}
	return nil
}

// buildSyscall turns a collected call into the log record, keeping exactly
// the ranges syscalls.Outputs names, served from the captured memory.
func buildSyscall(c *pendingCall) (format.Syscall, string) {
	h := &c.hdr
	rec := format.Syscall{Tid: int(h.Tid), Nr: int(h.Nr), Args: h.Args, Ret: h.Ret, Rip: h.Rip}
	for _, it := range c.items {
		if it.kind == bpf.TprecTpItemKindTP_ITEM_RESTART {
			// restart_syscall finished a call interrupted with
			// ERESTART_RESTARTBLOCK: the program saw one call, the
			// interrupted one, and the log holds that (as logPtraceSyscall).
			rec.Nr, rec.Args = restartOf(it)
		}
	}
	if !c.end {
		return rec, "its eBPF record is incomplete (a part was lost)"
	}
	d, ok := syscalls.Lookup(rec.Nr)
	if !ok || d.Kind == syscalls.Unsupported {
		return rec, ""
	}
	mem := newCapturedMem(c.items)
	ranges, err := syscalls.Outputs(d, rec.Args, rec.Ret, mem.read)
	if err != nil {
		return rec, fmt.Sprintf("outputs: %v", err)
	}
	for _, r := range ranges {
		b, err := mem.read(r.Addr, r.Len)
		if err != nil {
			return rec, err.Error()
		}
		rec.Out = append(rec.Out, format.OutBuf{Addr: r.Addr, Data: b})
	}
	return rec, ""
}

// opened is called when an interval has started, the target still stopped:
// whatever the ring buffer holds now happened before the interval (or is
// the recorder's own injected calls) and is dropped; the fault epoch moves on.
func (e *ebpfSource) opened(s *session) error {
	if err := e.drain(); err != nil {
		return err
	}
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
	e.mu.Lock()
	e.calls = map[uint64]*pendingCall{}
	e.faults = map[uint64]uint8{}
	e.epoch = p.Epoch
	e.mu.Unlock()
	e.nextSeq = p.Seq + 1
	return nil
}

// checkWritten compares the pages the fault stream saw written in the closed
// interval with the pagemap's written set (the authority for originals: it
// also sees writes that never fault). Disagreements are counted, shown with
// TPREC_DEBUG and summed up when recording ends.
func (e *ebpfSource) checkWritten(s *session, maps []format.Mapping, written []uint64) {
	onlyPM, onlyF, agree := compareWritten(maps, written, e.faultSet)
	e.check.intervals++
	e.check.agree += agree
	e.check.onlyPagemap += len(onlyPM)
	e.check.onlyFaults += len(onlyF)
	if debugStops {
		s.logf("fault stream vs pagemap: %d agree, %d only in pagemap, %d only in faults", agree, len(onlyPM), len(onlyF))
	}
	if testHookWritten != nil {
		testHookWritten(maps, written, e.faultSet)
	}
}

// testHookWritten, set by tests, sees every interval's two written sets.
var testHookWritten func(maps []format.Mapping, pagemap []uint64, faults map[uint64]uint8)

// compareWritten splits the written pages of private, recorded mappings
// that existed at the interval start into those both methods found, those
// only the pagemap found (writes that do not fault: process_vm_writev,
// O_DIRECT) and those only a write fault reported.
func compareWritten(maps []format.Mapping, written []uint64, faults map[uint64]uint8) (onlyPagemap, onlyFaults []uint64, agree int) {
	in := func(a uint64) bool {
		i := sort.Search(len(maps), func(i int) bool { return maps[i].End > a })
		return i < len(maps) && maps[i].Start <= a && !maps[i].Shared
	}
	pm := make(map[uint64]bool, len(written))
	for _, a := range written {
		pm[a] = true
		if faults[a]&uint8(bpf.TprecTpFaultFlagsTP_FAULT_WRITE) != 0 {
			agree++
		} else {
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
	if e.rd != nil {
		e.objs.Traced.Delete(uint32(e.pid))
		e.rd.Close()
		<-e.done
		e.rd = nil
	}
	if e.check.intervals > 0 {
		e.logf("fault stream vs pagemap over %d intervals: %d written pages agree, %d only in pagemap (writes without a fault), %d only in faults",
			e.check.intervals, e.check.agree, e.check.onlyPagemap, e.check.onlyFaults)
	}
	e.closeObjects()
}

func (e *ebpfSource) closeObjects() {
	for i := len(e.links) - 1; i >= 0; i-- {
		e.links[i].Close()
	}
	e.links = nil
	e.objs.Close()
}
