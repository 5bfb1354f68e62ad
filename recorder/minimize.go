package recorder

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/replayer"
)

// minimize cuts a full checkpoint down to the pages its window touches. A
// trial replay on this machine starts with every page inaccessible and serves
// each one on its first access (replayer.Options.Lazy); only the pages served
// are kept: their final content, the originals any interval saved of them, and
// the file content of mappings made in the window. Splicing still works: a
// replay from a later interval runs a suffix of the same execution and touches
// a subset of these pages. The trial also proves, before anything is written,
// that the checkpoint replays to the recorded end. If it does not, the full
// page set is kept and the header says why.
//
// The window is cut at interval starts into as many pieces as there are CPUs
// (trialPieces), replayed side by side: each piece but the last is verified
// against the state the recording saw where the next one begins
// (replayer.Options.Until), so together they prove what one replay from the
// first interval would, and the pages any of them touched are the pages that
// replay would touch. A piece serves its pages from the start of its own
// first interval; the file keeps every version of the pages kept, so that is
// the same set.
//
// With oneStart, the file then stores the memory of one interval start, the
// first piece's (storeOneStart).
//
// Once ctx ends (a second interrupt of tprec), the trial stops and every
// present page is kept, as for a failed trial.
func minimize(ctx context.Context, c *format.Checkpoint, store format.PageSource, oneStart bool, logf func(string, ...any)) {
	t0 := time.Now()
	pieces := runtime.NumCPU()
	hw, _ := replayer.HardwareBreakpoints()
	tr := newTrial(ctx, c, store, hw)
	res, err := tr.run(pieces, replayer.Options{})
	var d *replayer.Divergence
	if errors.As(err, &d) && d.Threads > 1 && pieces > 1 && len(trialPieces(c, pieces, hw)) > 1 {
		// A piece ends at an interval start, where the other threads
		// stopped wherever they were between two calls; replay runs them
		// on to their next one. The window in one piece ends at the
		// recorded end, which may be in reach.
		logf("a piece of the trial replay of %d threads diverged (%v): trying the window in one piece", d.Threads, err)
		pieces = 1
		res, err = tr.run(pieces, replayer.Options{})
	}
	if errors.As(err, &d) && d.Threads > 1 && !d.Timeout && ctx.Err() == nil {
		res, err = tr.late(pieces, err, logf)
	}
	for tries := 0; err != nil && tries < len(c.Intervals); tries++ {
		if !cutDiverged(c, err, logf) {
			break
		}
		res, err = tr.run(pieces, replayer.Options{})
	}
	if err != nil && ctx.Err() != nil {
		c.Header.FullPages = true
		c.Header.PageSetNote = fmt.Sprintf("every present page kept: the trial replay was stopped by an interrupt after %v", time.Since(t0).Round(time.Millisecond))
		logf("trial replay stopped by an interrupt, keeping every present page")
		return
	}
	if err != nil {
		c.Header.FullPages = true
		c.Header.PageSetNote = "every present page kept: the trial replay failed: " + err.Error()
		logf("trial replay failed, keeping every present page: %v", err)
		return
	}
	if debugStops {
		logf("trial replay: at most %d pieces, %d calls (%d completed in the process), the slowest ready after %v; %d pages served, %d written first (summed over the pieces)",
			pieces, res.Syscalls, res.InProcess, res.Ready.Round(time.Millisecond), len(res.Served), res.WrittenFirst)
	}
	start := slices.IndexFunc(c.Intervals, func(iv format.Interval) bool { return iv.Index == res.From })
	if fp, ok := store.(filePager); ok && start >= 0 {
		fp.addMappedPages(c, start, res.ServedMapped)
	}
	keep := make(map[uint64]bool, len(res.Served))
	for _, p := range res.Served {
		keep[p] = true
	}
	// The pages of the words the end search compared keep their final
	// content, which a replay's search compares with: one the window's
	// memory calls created (the heap that brk grew in the last interval)
	// was fresh memory to the trial, never served, and the file kept
	// nothing of it, so tpreplay stopped at every pass of the loop.
	ends := endWordPages(res.EndWords)
	for p := range ends {
		keep[p] = true
	}
	// An end page in the dead part of another thread's stack keeps its
	// final content, which a replay compares without that part
	// (format.DeadStacks): a trial whose threads left the same bytes there
	// read the page from its process, never served, and a later replay
	// that found the lock free where the recording waited on it had no
	// recorded content to compare with.
	dead := c.DeadStacksAt(len(c.Intervals), c.End.Tid)
	for _, d := range c.End.Digests {
		if slices.ContainsFunc(dead, func(r format.Span) bool { return r.Overlaps(d.Addr, d.Addr+format.PageSize) }) {
			keep[d.Addr], ends[d.Addr] = true, true
		}
	}
	// The live part of the stack stays whole, touched or not: a debugger
	// walking the call chain from the end (or from an interval start) needs
	// the frames of callers the window never returned to. It is small.
	stacks := 0
	addStack := func(maps []format.Mapping, rsp uint64) {
		for _, m := range maps {
			if m.Path == "[stack]" && rsp >= m.Start && rsp < m.End {
				for a := rsp &^ (format.PageSize - 1); a < m.End; a += format.PageSize {
					if !keep[a] {
						keep[a] = true
						stacks++
					}
				}
			}
		}
	}
	if n := len(c.Intervals); n > 0 {
		addStack(c.Intervals[n-1].Maps, c.End.Regs.Rsp)
	}
	for _, iv := range c.Intervals {
		for _, t := range iv.Threads {
			addStack(iv.Maps, t.Regs.Rsp)
		}
	}
	// With every start stored, a replay may also begin at a later interval,
	// and needs what each page held there. A page the window wrote is one the
	// trial touched, or one the window's memory calls created after the
	// trial's start, which the trial met as fresh memory and never served:
	// every written page keeps its references.
	if !oneStart {
		for _, iv := range c.Intervals {
			for _, p := range iv.Written {
				keep[p.Addr] = true
			}
		}
	}
	// A served page that no list holds was absent from every page set the
	// dump took (not present at the start, gone at the end: a heap that
	// grows and shrinks) and served as zeros (replayer zeroWhenAbsent): the
	// file says so, or a replay of it would find the page missing.
	listed := make(map[uint64]bool, len(c.Final))
	for _, p := range c.Final {
		listed[p.Addr] = true
	}
	for _, iv := range c.Intervals {
		for _, p := range iv.Written {
			listed[p.Addr] = true
		}
	}
	for _, a := range res.Served {
		if !listed[a] {
			c.Final = append(c.Final, format.PageRef{Addr: a, Hash: format.ZeroHash})
		}
	}
	sort.Slice(c.Final, func(i, j int) bool { return c.Final[i].Addr < c.Final[j].Addr })
	c.Final = filterPages(c.Final, keep)
	for i := range c.Intervals {
		c.Intervals[i].Written = filterPages(c.Intervals[i].Written, keep)
	}
	// A file mapping made in the window keeps the pages of it the trial
	// touched, not every page of it at an address the trial touched in
	// any mapping: a python3 that maps a 20 MB file 480 times, reading
	// 5% of each, at addresses that move a little from one to the next,
	// kept all of every mapping (a tpreplay of 35 s for 2 s of history).
	// A mapping made before the replay's start keeps nothing: a replay
	// does not run through its call.
	var startSeq uint64
	if start >= 0 {
		startSeq = c.Intervals[start].FirstSeq
	}
	for i := range c.Syscalls {
		rec := &c.Syscalls[i]
		if len(rec.Pages) == 0 {
			continue
		}
		mine := make(map[uint64]bool, len(res.ServedMapped[rec.Seq]))
		for _, a := range res.ServedMapped[rec.Seq] {
			mine[a] = rec.Seq >= startSeq
		}
		rec.Pages = filterPages(rec.Pages, mine)
	}
	c.Header.FullPages = false
	c.Header.PageSetNote = fmt.Sprintf("pages touched by a trial replay from interval %d (%d pages, %v), and %d more pages of the live stack",
		res.From, len(res.Served), time.Since(t0).Round(time.Millisecond), stacks)
	if c.Header.Schedule != format.ScheduleEager {
		c.Header.PageSetNote += fmt.Sprintf("; the threads replay under the %v schedule", c.Header.Schedule)
	}
	if oneStart && start >= 0 {
		storeOneStart(c, start, ends)
		c.Header.PageSetNote += fmt.Sprintf("; the start of interval %d stored, replays from later ones run through it", res.From)
	}
}

// storeOneStart makes c store the memory at the start of the interval at
// position k only: each page once, in the version that start saw (the
// original the earliest interval from k on saved, in k's Written list; else
// its final content, in Final). The later versions of the pages a busy
// window rewrites are most of a checkpoint's pages (a redis-server under
// load: 1,800 pages touched, 17,000 originals), and a replay from k
// recreates them as it runs. The other intervals keep their registers,
// maps and boundary digests (Interval.Digests, computed before), so a
// replay that arrives at their start is still verified there.
//
// The pages of ends (their addresses) also keep their final content: the
// trial's end search compared words of them in the process (EndWords), or
// they are end pages in another thread's dead stack (minimize), and
// tpreplay needs that content to do the same.
func storeOneStart(c *format.Checkpoint, k int, ends map[uint64]bool) {
	start := map[uint64]format.Hash{}
	for j := len(c.Intervals) - 1; j >= k; j-- {
		for _, p := range c.Intervals[j].Written {
			start[p.Addr] = p.Hash
		}
	}
	first := make([]format.PageRef, 0, len(start))
	for a, h := range start {
		first = append(first, format.PageRef{Addr: a, Hash: h})
	}
	sort.Slice(first, func(i, j int) bool { return first[i].Addr < first[j].Addr })
	var final []format.PageRef
	for _, p := range c.Final {
		if _, ok := start[p.Addr]; !ok || ends[p.Addr] {
			final = append(final, p)
		}
	}
	for i := range c.Intervals {
		c.Intervals[i].Written, c.Intervals[i].StartOmitted = nil, i != k
	}
	c.Intervals[k].Written = first
	c.Final = final
}

// endWordPages returns the pages of the words an end search compared.
func endWordPages(words []uint64) map[uint64]bool {
	pages := map[uint64]bool{}
	for _, w := range words {
		pages[w&^(format.PageSize-1)] = true
	}
	return pages
}

// trial runs the replays of one dump's trial within its budget: twice
// what one replay of the window may take (replayer.DefaultTimeout), for
// every try (pieces, the window in one piece, the late schedule, cuts)
// together. Once it is spent, the trial fails and the file keeps every
// page: a window whose threads spin for one another's stores made a
// zstd -T2 dump wait for minutes, each cut timing out in turn.
type trial struct {
	ctx      context.Context
	c        *format.Checkpoint
	store    format.PageSource
	hw       bool
	budget   time.Duration
	deadline time.Time     // zero: no replayable interval, nothing to bound
	took     time.Duration // the last replay
	// replay is trialReplay (tests put another one).
	replay func(ctx context.Context, c *format.Checkpoint, store format.PageSource, n int, hw bool, o replayer.Options) (*replayer.Result, error)
}

func newTrial(ctx context.Context, c *format.Checkpoint, store format.PageSource, hw bool) *trial {
	t := &trial{ctx: ctx, c: c, store: store, hw: hw, replay: trialReplay}
	if k := replayableFrom(c); k < len(c.Intervals) {
		t.budget = 2 * replayer.DefaultTimeout(c, k, hw)
		t.deadline = time.Now().Add(t.budget)
	}
	return t
}

// run replays the window in at most n pieces (trialReplay), each bounded by
// o.Timeout, else by what one replay of the replayable window may take, and
// by what is left of the budget.
func (t *trial) run(n int, o replayer.Options) (*replayer.Result, error) {
	if !t.deadline.IsZero() {
		left := time.Until(t.deadline)
		if left <= 0 {
			return nil, fmt.Errorf("the trial replay used its %v (twice what one replay of the window may take) without a replay that verified", t.budget.Round(time.Millisecond))
		}
		if o.Timeout == 0 {
			o.Timeout = replayer.DefaultTimeout(t.c, replayableFrom(t.c), t.hw)
		}
		o.Timeout = min(o.Timeout, left)
	}
	t0 := time.Now()
	res, err := t.replay(t.ctx, t.c, t.store, n, t.hw, o)
	t.took = time.Since(t0)
	return res, err
}

// late replays the window again under the late schedule
// (replayer/threads.go) after the eager replay diverged with eager in a
// replay of several threads, before it reached its deadline: the stores the
// threads make between their calls then reach each other in the other
// order where their stretches overlap. When it verifies, the file says so
// (Header.Schedule) and replays take that order; else the trial goes on
// from the eager divergence. A late replay can wait forever where a thread
// spins for a store of another one it holds, so it gets four times what the
// eager one took, at least 5 s.
func (t *trial) late(n int, eager error, logf func(string, ...any)) (*replayer.Result, error) {
	late := format.ScheduleLate
	o := replayer.Options{Schedule: &late, Timeout: max(5*time.Second, 4*t.took)}
	res, err := t.run(n, o)
	if err != nil {
		logf("the trial replay of several threads diverged (%v); under the late schedule too: %v", eager, err)
		return nil, eager
	}
	logf("the trial replay of several threads diverged (%v); it verified under the late schedule, which the file asks replays to use", eager)
	t.c.Header.Schedule = format.ScheduleLate
	return res, nil
}

// runTrial runs one replay of the trial. A panic in the replayer, a bug,
// fails the trial like a divergence (the checkpoint then keeps every page)
// instead of killing the recorder before it writes anything.
func runTrial(ctx context.Context, c *format.Checkpoint, store format.PageSource, o replayer.Options) (res *replayer.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, proc.Recovered(r)
		}
	}()
	return replayer.Run(ctx, c, store, o)
}

// trialReplay replays the window in at most n pieces at once (trialPieces,
// with hw: the debug registers work) and returns the first piece's result
// with the pages every piece served. o gives the schedule and the timeout.
func trialReplay(ctx context.Context, c *format.Checkpoint, store format.PageSource, n int, hw bool, o replayer.Options) (*replayer.Result, error) {
	o.Lazy, o.WrittenFirst = true, true
	o.Stub = trialStub
	if fp, ok := store.(filePager); ok {
		o.FilePage = fp.filePage
	}
	starts := trialPieces(c, n, hw)
	if len(starts) <= 1 {
		o.From = -1
		return runTrial(ctx, c, store, o)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]*replayer.Result, len(starts))
	errs := make([]error, len(starts))
	var wg sync.WaitGroup
	for i := range starts {
		until := 0
		if i+1 < len(starts) {
			until = starts[i+1]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := o
			o.From, o.Until, o.CPU = starts[i], until, i
			results[i], errs[i] = runTrial(ctx, c, store, o)
			if errs[i] != nil {
				cancel() // the others cannot save the trial
			}
		}()
	}
	wg.Wait()
	// A piece canceled because another failed only says so: report the
	// failure itself.
	for i, err := range errs {
		if err == nil || errors.Is(err, context.Canceled) {
			continue
		}
		last := c.Intervals[len(c.Intervals)-1].Index
		if i+1 < len(starts) {
			last = starts[i+1] - 1
		}
		return nil, fmt.Errorf("replay of intervals %d-%d: %w", starts[i], last, err)
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	res := *results[0]
	res.Intervals, res.Syscalls, res.InProcess, res.WrittenFirst = 0, 0, 0, 0
	seen := map[uint64]bool{}
	res.Served = nil
	res.ServedMapped = map[uint64][]uint64{}
	for _, r := range results {
		res.Intervals += r.Intervals
		res.Syscalls += r.Syscalls
		res.InProcess += r.InProcess
		res.WrittenFirst += r.WrittenFirst
		res.Ready = max(res.Ready, r.Ready)
		for _, p := range r.Served {
			if !seen[p] {
				seen[p] = true
				res.Served = append(res.Served, p)
			}
		}
		// A record's pages come from the piece that runs through its
		// call, and from the later ones that begin with its mapping in
		// place (addMappedPages drops the repeats).
		for seq, pages := range r.ServedMapped {
			res.ServedMapped[seq] = append(res.ServedMapped[seq], pages...)
		}
	}
	last := results[len(results)-1]
	res.End, res.Rip, res.EndWords = last.End, last.Rip, last.EndWords
	return &res, nil
}

// filePager is a page source that reads, for the trial, pages of file
// mappings of the window too large to have been read whole
// (liveSource.filePage), and afterwards gives each mmap record the pages
// of it the trial touched (addMappedPages).
type filePager interface {
	filePage(seq, addr uint64) (format.Hash, bool)
	addMappedPages(c *format.Checkpoint, k int, served map[uint64][]uint64)
}

// minPieceCalls is the fewest syscalls a piece of the trial replay gets
// (about half a second of ptrace stops here, when each call stops; the
// calls the replayed process completes itself take a fraction of that,
// replayer/inprocess.go).
const minPieceCalls = 30000

// trialPieces cuts the replayable end of the window (the intervals after the
// last one that is not replayable) at interval starts into at most n pieces
// of about the same number of syscalls, and returns the Index of each
// piece's first interval; nothing when no interval is replayable. A window
// of one thread, where the debug registers work (hw), is cut into pieces
// of about the same number of intervals instead, whatever its calls.
func trialPieces(c *format.Checkpoint, n int, hw bool) []int {
	k := replayableFrom(c)
	ivs := c.Intervals[k:]
	if len(ivs) == 0 {
		return nil
	}
	calls := make([]uint64, len(ivs))
	var total uint64
	for j, iv := range ivs {
		next := c.End.LastSeq + 1
		if j+1 < len(ivs) {
			next = ivs[j+1].FirstSeq
		}
		if next > iv.FirstSeq {
			calls[j] = next - iv.FirstSeq
		}
		total += calls[j]
	}
	// Each piece but the last ends with a search for the point where the
	// next began: a breakpoint at its rip, compared at every hit. In a tight
	// CPU-bound loop that is thousands of stops (a whole gzip replay of
	// 1,600 calls takes 2 s or 8 s depending on where in its loop the crash
	// landed, nearly all of it that search), while splitting pays for the
	// per-call stops of a syscall-heavy window. So every piece gets at least
	// minPieceCalls calls. In a replay of one thread the search compares in
	// the process (replayer/endsearch.go), a stop only where every register
	// matches: then what a piece costs is the program's own time, which the
	// intervals cut evenly (a gzip window's trial: 1.7-2.3 s in one piece,
	// 0.85-1.2 s in two).
	single := hw
	for _, iv := range ivs {
		single = single && len(iv.Threads) == 1
	}
	if single {
		for j := range calls {
			calls[j] = 1
		}
		total = uint64(len(ivs))
		n = max(1, min(n, len(ivs)))
	} else {
		n = max(1, min(n, len(ivs), int(total/minPieceCalls)))
	}
	// cum[j]: the calls (or intervals) before interval j. Piece i ends at
	// the interval start nearest to i/n of them, after the previous cut.
	cum := make([]uint64, len(ivs)+1)
	for j, c := range calls {
		cum[j+1] = cum[j] + c
	}
	starts := []int{ivs[0].Index}
	prev := 0
	waited := map[int]bool{} // waitsOnExit, by position in ivs
	for i := 1; i < n; i++ {
		target := total * uint64(i) / uint64(n)
		best := -1
		for j := prev + 1; j < len(ivs); j++ {
			if single && ivs[j].Threads[0].InSyscall {
				// A piece ending in a call (a sleep across the boundary)
				// would see its timeout's remaining time written back,
				// which only the end of the window allows for.
				continue
			}
			waits, ok := waited[j]
			if !ok {
				waits = waitsOnExit(c, ivs[j-1], ivs[j])
				waited[j] = waits
			}
			if waits {
				continue
			}
			if best < 0 || absDiff(cum[j], target) < absDiff(cum[best], target) {
				best = j
			}
		}
		if best < 0 {
			break
		}
		starts = append(starts, ivs[best].Index)
		prev = best
	}
	return starts
}

// waitsOnExit reports whether a piece may not end at the start of next,
// the interval after iv: a thread is in a call there, and a thread that
// made calls in iv is gone by then. A thread's end wakes the threads
// waiting to join it (its tid word cleared, a futex wake) without a call
// of its own, so the log does not order the two. A piece that ends there
// runs the ended thread to its end first, and the joining thread, which
// the recording caught in its futex wait, then finds the word cleared,
// makes no call and runs past the state the piece must end in (spawner.c:
// "made a syscall after the last recorded one", an rt_sigprocmask of the
// next pthread_create, in 1 trial of 4 to 8; the window in one piece
// verified).
func waitsOnExit(c *format.Checkpoint, iv, next format.Interval) bool {
	waiting := false
	alive := make(map[int]bool, len(next.Threads))
	for _, t := range next.Threads {
		alive[t.Tid] = true
		waiting = waiting || t.InSyscall
	}
	if !waiting {
		return false
	}
	lo, _ := c.SyscallIndex(iv.FirstSeq)
	last := 0
	for i := lo; i < len(c.Syscalls) && c.Syscalls[i].Seq < next.FirstSeq; i++ {
		if tid := c.Syscalls[i].Tid; tid != last {
			if !alive[tid] {
				return true
			}
			last = tid
		}
	}
	for _, t := range iv.Threads {
		if !alive[t.Tid] {
			return true
		}
	}
	return false
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// filterPages returns a new list with the references whose page is kept.
func filterPages(refs []format.PageRef, keep map[uint64]bool) []format.PageRef {
	var out []format.PageRef
	for _, p := range refs {
		if keep[p.Addr] {
			out = append(out, p)
		}
	}
	return out
}

// cutBefore marks the intervals up to index as not replayable, for why, if
// one after it remains.
func cutBefore(c *format.Checkpoint, index int, why string) bool {
	if len(c.Intervals) == 0 || c.Intervals[len(c.Intervals)-1].Index <= index {
		return false
	}
	for i := range c.Intervals {
		if c.Intervals[i].Index <= index && c.Intervals[i].Replayable {
			c.Intervals[i].Replayable = false
			c.Intervals[i].Reason = why
		}
	}
	return true
}

// cutDiverged moves the start of the window past the interval where the
// trial replay met a divergence a later start avoids, and reports whether it
// did.
func cutDiverged(c *format.Checkpoint, err error, logf func(string, ...any)) bool {
	var d *replayer.Divergence
	if !errors.As(err, &d) {
		return false
	}
	switch {
	case d.Signal != nil:
		// A signal delivered in user code whose point the trial could not
		// find (a loop without syscalls passes it too often): the window
		// starts after its interval, as it did before such signals were
		// replayed.
		if !cutBefore(c, d.Signal.Interval, "the trial replay could not place a signal delivered in user code: "+err.Error()) {
			return false
		}
		logf("the trial replay could not place a signal (%v): the window now starts after interval %d", err, d.Signal.Interval)
	case d.Threads > 1 || !d.Timeout || d.EndPassed:
		// Several threads, which took another path: they met through
		// memory between their calls in a way the order of the calls does
		// not give (replayer/threads.go). Or one thread, which read
		// something the recording did not capture: an instruction that
		// gives data without a syscall (rdtsc, rdrand), or memory another
		// process wrote. Either way a start after the interval where that
		// showed may not meet it: the window starts there. A trial that
		// ran out of time is cut only when it had passed the end's rip
		// with the recorded registers and other memory, or compared the
		// passes in the process (gpg, whose end was in a cipher loop that
		// passes that point a million times a second): one that never got
		// there, or stopped at each pass, may have been slow, and a later
		// start may spend that time again.
		what := "the trial replay"
		if d.Threads > 1 {
			what = fmt.Sprintf("the trial replay of %d threads", d.Threads)
		}
		// The divergence came before call Seq+1 ran: Seq is the last call
		// replayed, or the one the replay stopped at, and a piece that
		// diverged before its first call gives the call before its start
		// (the window's first piece, the seq before any interval: no cut
		// was made, and the trial failed, in 1 of 5 runs of
		// TestLargeFileMappedInWindow on a faster CPU).
		at := intervalOf(c, d.Seq+1)
		if at < 0 {
			return false
		}
		if cutBefore(c, at, fmt.Sprintf("%s diverged in it: %v", what, err)) {
			logf("%s diverged (%v): the window now starts after interval %d", what, err, at)
			return true
		}
		// It showed in the last interval, typically at the end, where
		// memory differed: with several threads, a store one thread made
		// between two calls reached another one earlier or later than in
		// the recording (memcached's clock, which the main thread stores
		// once a second and the workers read into the items they touch);
		// with one, a value the recording did not capture (gpg's session
		// key, made from rdrand and rdtsc, ends up in what it encrypts).
		// That may have happened anywhere in the window, and a replay
		// from an interval start after it reaches the end: the window
		// keeps its second half.
		half, ok := firstHalfEnd(c)
		if !ok || !cutBefore(c, half, fmt.Sprintf("%s from here diverged in the last interval: %v", what, err)) {
			return false
		}
		logf("%s diverged in its last interval (%v): the window now starts after interval %d", what, err, half)
	default:
		return false
	}
	return true
}

// replayableFrom is the position in c.Intervals of the first interval after
// the last one that is not replayable: where the replayable end of the
// window begins (len(c.Intervals) when it has none).
func replayableFrom(c *format.Checkpoint) int {
	k := 0
	for i, iv := range c.Intervals {
		if !iv.Replayable {
			k = i + 1
		}
	}
	return k
}

// firstHalfEnd is the Index of the last interval of the first half of the
// replayable end of the window (after the last interval that is not
// replayable); false when that part has a single interval.
func firstHalfEnd(c *format.Checkpoint) (int, bool) {
	k := replayableFrom(c)
	n := len(c.Intervals) - k
	if n < 2 {
		return 0, false
	}
	return c.Intervals[k+n/2-1].Index, true
}

// intervalOf is the Index of the interval call seq belongs to, -1 if none.
func intervalOf(c *format.Checkpoint, seq uint64) int {
	at := -1
	for _, iv := range c.Intervals {
		if iv.FirstSeq <= seq {
			at = iv.Index
		}
	}
	return at
}
