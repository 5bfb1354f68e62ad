package recorder

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/internal/parallel"
	"github.com/tprec/tprec/internal/prefault"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// dump takes a checkpoint of the retained intervals, ending at end. While
// the target is stopped it only gathers the log, the intervals and the list
// of pages; the content of the pages is read later from a live source: a
// "dump shadow" forked from the target at this instant (for a crash or a
// request, so the target dies or runs on at once), or the target itself (at
// exit, where nothing can be injected and the process is going away anyway).
// Minimizing and writing happen in the background for the former.
func (s *session) dump(end format.EndState, reason string) error {
	t0 := time.Now()
	clk := newStepClock()
	stopProfile := dumpProfile()
	c, src, assemble, err := s.collect(end, reason, t0, clk)
	if err != nil {
		stopProfile()
		return err
	}
	// The shadow is forked after the log is complete, so that a backend that
	// sees every syscall (eBPF) does not find the injected clone in it.
	live := s.pid
	var dsh *shadow
	// A copy of the pages the checkpoint may give as final content, and of
	// the loader's list of objects, lets the process go now, unless they
	// are large. At an exit no shadow can be forked from it. Before a crash
	// handler runs (crashQuiet), a shadow would share every page with the
	// process and the handler's writes would each take a copy-on-write
	// fault: redis-server's memory test writes all of its memory, its own
	// rseq area among it, and a fault that slept there had the kernel kill
	// it on the way back.
	if reason == format.EndExit || reason == format.EndSignal && s.crashCaught {
		src.pid = live
		if src.freeze(c.Final) {
			s.readModules(c, s.pid)
			clk.mark(fmt.Sprintf("%s: %d pages copied", reason, len(src.frozen)))
		}
	}
	if reason != format.EndExit && src.frozen == nil {
		dsh, err = s.createShadow()
		if refused, forbidden := (cloneRefused{}), (seccompForbids{}); errors.As(err, &refused) || errors.As(err, &forbidden) {
			// The file is made from the target itself, held until it is
			// written, as at an exit.
			s.errorf("process %d: no dump shadow (%v): the process stays stopped until its checkpoint is written", s.pid, err)
		} else if err != nil {
			stopProfile()
			return fmt.Errorf("fork the dump shadow: %w", err)
		} else {
			live = dsh.pid
			s.dropFiles(dsh)
			s.nameShadow(dsh)
			// Its dump retires it: a detach meanwhile (an interrupt
			// right after a requested dump) must not kill it as a
			// stray, or the trial and the pages read from it fail.
			delete(s.madeShadows, dsh.pid)
		}
	}
	var drop *crashDrop
	if reason == format.EndSignal && s.crashCaught {
		// The handler may return and the process go on (handlerReturned):
		// then this was no crash, and its checkpoint is dropped.
		drop = &crashDrop{}
		s.crashDrop = drop
	}
	name := fmt.Sprintf("tp-%d-%s.tpc", s.pid, t0.UTC().Format("20060102T150405.000Z"))
	path := filepath.Join(s.o.OutputDir, name)
	held := time.Since(t0)
	background := dsh != nil || src.frozen != nil
	if !background {
		held = 0 // held until the file is written (finish)
	}
	clk.mark("dump shadow")
	clk.log(s, "dump")
	work := func() {
		defer stopProfile()
		defer dumpMemory(src.heapBytes)()
		src.pid = live
		fclk := newStepClock()
		// The digests and the list of loaded objects read memory, the
		// assembly decodes the log: each takes about one CPU, side by side.
		gcOn := assembling()
		read := make(chan error, 1)
		rseqs := c.ThreadRseqAreas()
		go func() { read <- s.readEnd(c, src, rseqs) }()
		err := assemble()
		gcOn()
		if rerr := <-read; err == nil {
			err = rerr
		}
		fclk.mark("assemble, digests and loaded objects")
		if all := c.RseqAreas(); err == nil && len(all) > len(rseqs) {
			// A call of the window registered an area the digests must
			// leave out too (a thread it started): again, with it.
			err = s.readEnd(c, src, all)
			fclk.mark("digests again, with the rseq areas registered in the window")
		}
		if err == nil {
			err = s.finish(path, c, src, t0, held, fclk, drop)
		}
		src.closeBig()
		fclk.log(s, "dump in the background")
		if err != nil {
			s.errorf("checkpoint not written: %v", err)
			s.mu.Lock()
			s.lostDumps++
			s.mu.Unlock()
		}
		if dsh != nil {
			s.retire(dsh)
		}
	}
	if !background {
		work()
		return nil
	}
	s.pending.Add(1)
	s.mu.Lock()
	if s.dumping == 0 {
		s.dumpingSince = t0
	}
	s.dumping++
	s.mu.Unlock()
	go func() {
		defer s.pending.Done()
		work()
		s.mu.Lock()
		s.dumping--
		s.mu.Unlock()
	}()
	return nil
}

// collect gathers, while the target is stopped, what only the stopped target
// can give: the end state, the list of pages a start state may need (present
// at the start of the oldest interval, or now), the content of files mapped in
// the window, and which retained intervals and saved pages the checkpoint
// covers. The final content of those pages is not read here: their references
// name the live source (liveHash) until finish reads what is kept. The
// returned assemble copies the syscall log into the checkpoint (the saved
// pages are decompressed when read, liveSource.saved); it needs no process
// and runs after the target is released (hundreds of milliseconds for a few
// hundred thousand calls), and
// may run while the session goes on recording: it reads only intervals and
// pages that are no longer changed, by pointer, so the ring dropping them
// meanwhile does not matter.
func (s *session) collect(end format.EndState, reason string, t0 time.Time, clk *stepClock) (*format.Checkpoint, *liveSource, func() error, error) {
	// The close reads the memory map, the pagemap and the shared writable
	// pages while the target is held: the present pages and the final
	// content of the shared ones come from that same read.
	snap, err := s.closeIntervalSnap(t0, false)
	if err != nil {
		return nil, nil, nil, err
	}
	clk.mark("close interval")
	if end.Kind == format.EndRequest {
		// Read after the close, which runs the thread out of a clock read
		// it was stopped in (clockStepOut): a request ends where the
		// thread stands then, not in the clock log's code, which no
		// replay has.
		if end.Regs, err = proc.GetRegs(end.Tid); err != nil {
			return nil, nil, nil, err
		}
	}
	ivs := append([]*interval(nil), s.ring.intervals...)
	if len(ivs) == 0 {
		return nil, nil, nil, errors.New("nothing recorded yet")
	}
	// A file holds at most format.MaxSyscalls records: keep the newest
	// intervals that fit (always the last one, which ends at the failure).
	total := 0
	for i := len(ivs) - 1; i >= 0; i-- {
		total += ivs[i].calls()
		if total > format.MaxSyscalls && i < len(ivs)-1 {
			s.logf("checkpoint keeps the last %d intervals: the older ones would exceed %d syscall records", len(ivs)-1-i, format.MaxSyscalls)
			ivs = ivs[i+1:]
			break
		}
	}
	if end.XState, err = proc.GetXState(end.Tid); err != nil {
		return nil, nil, nil, err
	}
	end.Regs, _ = normalize(end.Regs)
	end.Threads = s.endThreads(end.Tid)
	end.LastSeq = s.seq
	end.Rseq = s.threadRseq(end.Tid, end.Regs.FsBase)

	if snap == nil {
		// The close read nothing (no interval open, or its shadow lost).
		maps, err := s.readMaps()
		if err != nil {
			return nil, nil, nil, err
		}
		if snap, err = s.readSnapshot(maps); err != nil {
			return nil, nil, nil, fmt.Errorf("present pages: %w", err)
		}
		clk.mark("maps+present")
	}
	now := snap.present()
	clk.mark("present")
	// The live source forked from the target shares its shared writable
	// pages, which other processes may go on writing: their final content
	// is the one they had now.
	shared := snap.shared
	addrs := unionPages(ivs[0].present, now)
	store := format.NewMemStore()
	// Final content exists for the pages present now. One that was present
	// at the start and is gone now disappeared in some interval, which saved
	// its original (writtenPages); a live reference to it would make a
	// replay from a later interval, where it is absent or not yet present,
	// read memory the process no longer has.
	live := unionPages(nil, now)
	final := make([]format.PageRef, len(live))
	for i, a := range live {
		final[i] = format.PageRef{Addr: a, Hash: liveHash(a)}
	}
	clk.mark("unions")
	c := &format.Checkpoint{Header: s.hdr, Final: final, End: end}
	c.Header.ThreadNames = proc.ThreadNames(s.pid)
	c.Header.XSave = proc.XSaveComponents(proc.XSaveMask(end.XState))
	saved := map[format.Hash]*blob{}
	filePages := map[uint64][]format.PageRef{}
	fileCache := filePageCache{}
	big := map[uint64]*mappedFile{}
	for _, iv := range ivs {
		for _, p := range iv.meta.Written {
			if p.Hash == format.ZeroHash || saved[p.Hash] != nil {
				continue
			}
			b, ok := s.ring.pages[p.Hash]
			if !ok {
				return nil, nil, nil, fmt.Errorf("page %x not in the ring", p.Hash)
			}
			saved[p.Hash] = b
		}
		// The ring closes an interval's files when it drops it.
		for seq, m := range iv.files {
			filePages[seq] = m.pages(addrs, store, fileCache)
			if !m.readWhole() {
				// The ring may close it before the trial runs.
				if fd, err := unix.Dup(int(m.f.Fd())); err == nil {
					dup := *m
					dup.f = os.NewFile(uintptr(fd), m.f.Name())
					big[seq] = &dup
				}
			}
		}
		meta := iv.meta
		if _, err := meta.Thread(end.Tid); err != nil && meta.Replayable {
			// The thread the process ends in started during this
			// interval: a replay starts with it (replayer/threads.go).
			meta.Replayable, meta.Reason = false, fmt.Sprintf("thread %d, which the checkpoint ends in, started in this interval: a replay starts after it", end.Tid)
		}
		c.Intervals = append(c.Intervals, meta)
		c.Header.Lost += iv.lost
		c.Signals = append(c.Signals, iv.signals...)
	}
	n := 0
	views := make([]logView, len(ivs))
	counts := make([]int, len(ivs))
	for i, iv := range ivs {
		counts[i] = iv.calls()
		n += counts[i]
		views[i] = iv.view()
	}
	// The intervals' logs are decoded side by side, each into its own part
	// of the list (a quarter second for half a million calls on one CPU).
	assemble := func() error {
		c.Syscalls = make([]format.Syscall, n)
		prefault.Slice(c.Syscalls)
		parts := make([][]format.Syscall, len(views))
		at := 0
		for i := range views {
			parts[i] = c.Syscalls[at : at+counts[i] : at+counts[i]]
			at += counts[i]
		}
		return parallel.Each(len(views), func(i int) error {
			got, err := views[i].appendTo(parts[i][:0])
			switch {
			case err != nil:
				return err // a bug: better no checkpoint than a wrong one
			case len(got) != counts[i]:
				return fmt.Errorf("a syscall log of the ring holds %d calls, its interval counted %d", len(got), counts[i])
			case len(got) > 0 && &got[0] != &parts[i][0]:
				copy(parts[i], got)
			}
			for k := range parts[i] {
				rec := &parts[i][k]
				if p, ok := filePages[rec.Seq]; ok {
					rec.Pages = p
				}
				clearUnusedArgs(rec)
			}
			return nil
		})
	}
	clk.mark(fmt.Sprintf("files and saved pages (%d pages, %d syscalls)", len(saved), n))
	// The stack page and the pages the last interval wrote tell a matching
	// end from a loop iteration with the same registers; so do the pages
	// the interval before wrote, when the end came soon after a boundary
	// (signalDigests).
	c.End.Digests = nil
	written := ivs[len(ivs)-1].meta.Written
	if len(ivs) > 1 {
		written = append(append([]format.PageRef(nil), written...), ivs[len(ivs)-2].meta.Written...)
	}
	for _, a := range format.EndDigestPages(end.Regs.Rsp, written) {
		c.End.Digests = append(c.End.Digests, format.PageRef{Addr: a})
	}
	c.Header.DumpTime = time.Now()
	c.Header.Reason = reason
	c.Header.FullPages = true
	// A record takes 136 bytes, an output 32 more and its bytes when they
	// come from a packed log; the writer's streams and the trial's state
	// add to that. A python3 window of 1.5 million calls held 480 MB live
	// while it was written: at 200 bytes a call the limit stood there and
	// the collector ran 20 times back to back (write 2.8-3.6 s).
	heap := int64(len(saved))*format.PageSize + int64(n)*400
	src := &liveSource{store: store, saved: saved, shared: shared, heapBytes: heap, big: big}
	if s.clk != nil {
		src.clockSites = slices.Clone(s.clk.sites)
	}
	return c, src, assemble, nil
}

// crashDrop is the fate of the checkpoint of a crash whose signal the
// process catches, decided after the dump began: the handler may return
// and the process go on, and then there was no crash to keep a checkpoint
// of (a JVM takes a SIGSEGV it handles at every start-up: a 10 MB
// checkpoint of nothing, every time).
type crashDrop struct {
	mu   sync.Mutex
	drop bool
	path string // where the file went, once written
}

// dropped reports whether the checkpoint is to be dropped (false for nil).
func (d *crashDrop) dropped() bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drop
}

// written notes that the file is at path, and reports whether it is to be
// dropped after all.
func (d *crashDrop) written(path string) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.path = path
	return d.drop
}

// dropNow drops the checkpoint: not written, or removed if it was.
func (d *crashDrop) dropNow() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drop = true
	if d.path != "" {
		os.Remove(d.path)
	}
}

// readEnd reads from the live source what the checkpoint needs besides its
// log: the end digests and the digests of each interval start, which leave
// out the rseq areas rseqs (format.DigestPage), and the loader's list of
// objects. It runs while the log is assembled, and reads no syscall record.
func (s *session) readEnd(c *format.Checkpoint, src *liveSource, rseqs []format.Rseq) error {
	var err error
	if c.End.Digests, err = digests(c.End.Digests, src, rseqs, c.End.Regs.Rsp); err != nil {
		return err
	}
	// Digests of each interval start, from the memory recorded there, before
	// minimizing may drop that memory: a replay arriving there is checked
	// against them (the trial's pieces, tpreplay --until).
	parallel.Each(len(c.Intervals), func(i int) error {
		var err error
		if c.Intervals[i].Digests, err = c.BoundaryDigests(i, src, rseqs); err != nil {
			s.logf("interval %d: no boundary digests: %v", c.Intervals[i].Index, err)
		}
		return nil
	})
	if c.Header.Modules == nil { // not read at an exit already, or by a first call
		s.readModules(c, src.pid)
	}
	return nil
}

// readModules reads the loader's list of objects from process pid, for a
// debugger's thread-local lookups in the replay (its own records are
// seldom among the kept pages).
func (s *session) readModules(c *format.Checkpoint, pid int) {
	if maps, err := proc.ReadMaps(pid); err == nil {
		var err error
		if c.Header.Modules, err = proc.LinkMap(pid, maps); err != nil {
			s.logf("no list of loaded objects: %v", err)
		}
	}
}

// finish minimizes the checkpoint (unless --full-pages), reads the final
// content of the pages kept, and writes it.
func (s *session) finish(path string, c *format.Checkpoint, src *liveSource, t0 time.Time, held time.Duration, clk *stepClock, drop *crashDrop) error {
	var err error
	candidates := len(c.Final)
	if !s.o.FullPages {
		minimize(s.hurry, c, src, !s.o.AllStarts, s.logf)
		clk.mark("trial replay")
	}
	if c.Final, err = src.resolve(c.Final); err != nil {
		return err
	}
	if err = src.fileNames(c); err != nil {
		return err
	}
	clk.mark("final pages")
	if drop.dropped() {
		return nil
	}
	if path, err = s.write(path, c, src); err != nil {
		return err
	}
	clk.mark("write")
	if drop.written(path) {
		os.Remove(path)
		return nil
	}
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	kept := fmt.Sprintf("all %d present pages", len(c.Final))
	if !c.Header.FullPages {
		addrs := map[uint64]bool{}
		for _, p := range c.Final {
			addrs[p.Addr] = true
		}
		for _, iv := range c.Intervals {
			for _, p := range iv.Written {
				addrs[p.Addr] = true
			}
		}
		// The touched pages may outnumber the present ones: pages of the
		// window that were gone by its end (freed, unmapped) count too.
		kept = fmt.Sprintf("%d touched pages (%d present at the end)", len(addrs), candidates)
	}
	s.logf("wrote %s: %d intervals, %d syscalls, %s, %d bytes, in %v (the process was held %v)",
		path, len(c.Intervals), len(c.Syscalls), kept, size, time.Since(t0).Round(time.Millisecond), cmp.Or(held, time.Since(t0)).Round(time.Millisecond))
	s.mu.Lock()
	s.dumps = append(s.dumps, path)
	s.mu.Unlock()
	if s.o.Dumped != nil {
		s.o.Dumped(path)
	}
	return nil
}

// write writes the checkpoint at path or, when its directory cannot take
// it (full, over quota, read-only, gone), in the first fallback directory on
// another file system that can, and says so even with --quiet: the process
// is gone and the file is all that is left of its crash. It returns where
// the file went.
func (s *session) write(path string, c *format.Checkpoint, pages format.PageSource) (string, error) {
	err := format.Write(path, c, pages)
	if err == nil || !storageError(err) {
		return path, err
	}
	tried := map[uint64]bool{}
	if dev, ok := deviceOf(filepath.Dir(path)); ok {
		tried[dev] = true
	}
	for _, dir := range s.o.FallbackDirs {
		dev, ok := deviceOf(dir)
		if !ok || tried[dev] {
			continue
		}
		tried[dev] = true
		alt := filepath.Join(dir, filepath.Base(path))
		if werr := format.Write(alt, c, pages); werr != nil {
			s.logf("fallback %s: %v", dir, werr)
			continue
		}
		s.errorf("%v; the checkpoint went to %s instead", err, alt)
		return alt, nil
	}
	return path, err
}

// storageError reports whether a write failed for want of a place to put
// the file rather than because of its content.
func storageError(err error) bool {
	for _, e := range []error{unix.ENOSPC, unix.EDQUOT, unix.EROFS, unix.EACCES, unix.EPERM, unix.ENOENT, unix.ENOTDIR, unix.EIO, unix.EFBIG} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// deviceOf returns the device of the file system holding dir.
func deviceOf(dir string) (uint64, bool) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, false
	}
	return st.Dev, true
}

// digests computes the end-state digests of the listed pages
// (format.EndDigestPages) from the live source.
func digests(pages []format.PageRef, src *liveSource, rseqs []format.Rseq, rsp uint64) ([]format.PageRef, error) {
	var out []format.PageRef
	for _, p := range pages {
		data, err := src.read(p.Addr)
		if err != nil {
			continue // unmapped since: nothing to compare
		}
		out = append(out, format.PageRef{Addr: p.Addr, Hash: format.DigestPage(p.Addr, data, rseqs, rsp)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// clearUnusedArgs zeroes the argument registers a known call does not take
// (syscalls.Desc.NArgs): whatever they held is noise that replay never
// compares, and the file stores a value that does not change from one call
// of the same number to the next in no bytes at all (FORMAT.md, SYSCL).
// Calls the table does not know keep all six.
func clearUnusedArgs(rec *format.Syscall) {
	if d, ok := syscalls.Lookup(rec.Nr); ok {
		for i := d.NArgs; i < len(rec.Args); i++ {
			rec.Args[i] = 0
		}
	}
}

// unionPages returns the sorted page addresses in either list of runs. It
// merges the runs rather than the pages: it runs while the target is held,
// and a set of the pages of a 512 MB python3 took 90-150 ms there.
func unionPages(a, b []pageRun) []uint64 {
	runs := slices.Concat(a, b)
	slices.SortFunc(runs, func(x, y pageRun) int { return cmp.Compare(x.start, y.start) })
	var out []uint64
	var next uint64 // the first page not yet in out
	for _, r := range runs {
		for p := max(r.start, next); p < r.end; p += format.PageSize {
			out = append(out, p)
		}
		next = max(next, r.end)
	}
	return out
}

// cpuFlags returns the ISA flags of the first CPU in /proc/cpuinfo.
func cpuFlags() []string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "flags" {
			return strings.Fields(v)
		}
	}
	return nil
}

// dumpProfile starts a Go CPU profile of the first dump into the file named
// by TPREC_DUMPPROFILE (the steps TPREC_DEBUG=1 times, function by
// function); the returned function stops it. Without the variable, or when
// a profile already runs (TPREC_CPUPROFILE), it does nothing.
func dumpProfile() func() {
	path := os.Getenv("TPREC_DUMPPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	runtime.SetCPUProfileRate(1000) // a dump lasts a fraction of a second
	if pprof.StartCPUProfile(f) != nil {
		f.Close()
		return func() {}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}
}
