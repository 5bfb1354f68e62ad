package recorder

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onThread runs functions on one locked thread, and returns its tid.
func onThread(t *testing.T) (tid int, run func(func())) {
	t.Helper()
	fns := make(chan func())
	ready := make(chan int)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the test
		ready <- unix.Gettid()
		for fn := range fns {
			fn()
			ready <- 0
		}
	}()
	t.Cleanup(func() { close(fns) })
	tid = <-ready
	return tid, func(fn func()) {
		fns <- fn
		<-ready
	}
}

func policyOf(t *testing.T, tid int) uint32 {
	t.Helper()
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a.Policy
}

// requireRaisable skips the test (fails it under CI=true) where this
// process may not go back from SCHED_IDLE.
func requireRaisable(t *testing.T) {
	t.Helper()
	if !raisable() {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: this process may not go back from SCHED_IDLE (no CAP_SYS_NICE)")
		}
		t.Skip("skipped: without CAP_SYS_NICE nothing is lowered (run as root)")
	}
}

// ownPolicy is requireRaisable, and returns tprec's own policy, which must
// not be SCHED_IDLE itself.
func ownPolicy(t *testing.T) uint32 {
	t.Helper()
	requireRaisable(t)
	own := ownSched.Policy
	if own == unix.SCHED_IDLE {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: the test runs at SCHED_IDLE, where lowering changes nothing")
		}
		t.Skip("skipped: the test itself runs at SCHED_IDLE, where lowering changes nothing")
	}
	return own
}

// A lowered thread runs at SCHED_IDLE until raised; held, it stays raised
// whatever it asks; a cpuYield neither raises it nor lets a raise leave
// SCHED_IDLE; a thread made before any of this keeps tprec's own policy.
func TestLoweredThread(t *testing.T) {
	own := ownPolicy(t)
	var l lowered
	tid, run := onThread(t)
	run(l.lower)
	if p := policyOf(t, tid); p != unix.SCHED_IDLE || l.lowFor() == 0 {
		t.Fatalf("lowered thread at policy %d", p)
	}
	l.raise()
	if p := policyOf(t, tid); p != own || l.lowFor() != 0 {
		t.Fatalf("raised thread at policy %d, want %d", p, own)
	}
	l.hold()
	run(l.lower)
	if p := policyOf(t, tid); p != own {
		t.Fatalf("held thread lowered itself: policy %d", p)
	}
	l.unhold()
	run(l.lower)
	if p := policyOf(t, tid); p != unix.SCHED_IDLE {
		t.Fatalf("thread not lowered once unheld: policy %d", p)
	}
	var y cpuYield
	y.on()
	l.raise()
	if p := policyOf(t, tid); p != unix.SCHED_IDLE {
		t.Fatalf("thread raised during a yield: policy %d", p)
	}
	y.off()
	if p := policyOf(t, tid); p != own {
		t.Fatalf("thread raised during a yield is at policy %d after it, want %d", p, own)
	}
	run(l.lower)
	y.on()
	y.off()
	if p := policyOf(t, tid); p != unix.SCHED_IDLE {
		t.Fatalf("a yield's end raised a lowered thread: policy %d", p)
	}
	if p := policyOf(t, unix.Gettid()); p != own {
		t.Fatalf("the test's own thread is at policy %d after a yield, want %d", p, own)
	}
}

// watchRing is the consumer and producer positions of a ring buffer of
// watchRingSize bytes that no program writes: a test moves them.
type watchRing struct{ cons, prod uint64 }

const watchRingSize = 1 << 20

// watchedSession is a session for the watchdog alone, its eBPF source
// reading the ring buffer that ring describes.
func watchedSession() (*session, *ebpfSource, *watchRing) {
	ring := &watchRing{}
	e := &ebpfSource{ring: &ringReader{ringRing: ringRing{consPos: &ring.cons, prodPos: &ring.prod, mask: watchRingSize - 1}}}
	return &session{src: e}, e, ring
}

// The watchdog raises the saving once it has waited lowWait at SCHED_IDLE,
// and the ring buffer reader once the ring is more than an eighth full.
func TestWatchdogRaises(t *testing.T) {
	requireRaisable(t)
	s, e, ring := watchedSession()
	saver, runSaver := onThread(t)
	reader, runReader := onThread(t)
	runReader(e.low.lower)
	stop := s.watchdog()
	defer stop()
	t0 := time.Now()
	runSaver(s.deferLow.lower)
	for policyOf(t, saver) == unix.SCHED_IDLE && time.Since(t0) < 2*time.Second {
		time.Sleep(time.Millisecond)
	}
	// Raised after lowWait, not before: t0 was taken before the lowering.
	if waited := time.Since(t0); policyOf(t, saver) != ownSched.Policy || waited < lowWait {
		t.Fatalf("saving at policy %d after %v", policyOf(t, saver), waited)
	}
	runSaver(s.deferLow.lower)
	if p := policyOf(t, saver); p != ownSched.Policy {
		t.Fatalf("saving lowered again right after the watchdog raised it: policy %d", p)
	}
	time.Sleep(3 * watchPeriod)
	if p := policyOf(t, reader); p != unix.SCHED_IDLE {
		t.Fatalf("reader raised with an empty ring: policy %d", p)
	}
	atomic.StoreUint64(&ring.prod, watchRingSize/4)
	for t1 := time.Now(); policyOf(t, reader) == unix.SCHED_IDLE && time.Since(t1) < 2*time.Second; {
		time.Sleep(time.Millisecond)
	}
	if p := policyOf(t, reader); p != ownSched.Policy {
		t.Fatalf("reader not raised with a quarter-full ring: policy %d", p)
	}
}

// With nothing to watch (the ring buffer empty, the saving not lowered),
// the watchdog looks less and less often; records in the ring have it look
// every watchPeriod again, and so does a lowering of the saving, which it
// then raises. A timer that fires late only makes fewer looks.
func TestWatchdogBacksOffWhileIdle(t *testing.T) {
	requireRaisable(t)
	s, _, ring := watchedSession()
	saver, runSaver := onThread(t)
	stop := s.watchdog()
	defer stop()
	const span = 500 * time.Millisecond
	looks := func() int64 {
		n := s.looks.Load()
		time.Sleep(span)
		return s.looks.Load() - n
	}
	idle := looks()
	if idle < 2 || idle >= int64(span/watchPeriod)/2 {
		t.Fatalf("%d looks in %v with nothing to watch, want from 2 to %d", idle, span, int64(span/watchPeriod)/2-1)
	}
	t.Logf("%d looks in %v with nothing to watch", idle, span)
	atomic.StoreUint64(&ring.prod, watchRingSize/64) // records, too few for a rescue
	busy := looks()
	t.Logf("%d looks in %v with records in the ring", busy, span)
	if busy <= idle {
		t.Errorf("%d looks in %v with records in the ring, against %d without", busy, span, idle)
	}
	atomic.StoreUint64(&ring.cons, watchRingSize/64)
	looks()
	t0 := time.Now()
	runSaver(s.deferLow.lower)
	for policyOf(t, saver) == unix.SCHED_IDLE && time.Since(t0) < 2*time.Second {
		time.Sleep(time.Millisecond)
	}
	if p := policyOf(t, saver); p != ownSched.Policy {
		t.Fatalf("saving not raised after %v at SCHED_IDLE: policy %d", time.Since(t0), p)
	}
}

// A trial replay's process follows tprec's policy once listed
// (trialStub): SCHED_IDLE while a cpuYield is on, tprec's own policy once
// it is off, whatever policy it was started at; and no longer once it is
// taken off the list.
func TestTrialStubFollowsYield(t *testing.T) {
	own := ownPolicy(t)
	// A process of two threads started while tprec yields: it inherits
	// SCHED_IDLE, as a trial's stub did.
	var y cpuYield
	y.on()
	cmd := exec.Command("python3", "-c", "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); time.sleep(30)")
	if err := cmd.Start(); err != nil {
		y.off()
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	tids := func() []int {
		for {
			ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) == 2 {
				var ids []int
				for _, e := range ents {
					id, _ := strconv.Atoi(e.Name())
					ids = append(ids, id)
				}
				return ids
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	want := func(when string, p uint32) {
		t.Helper()
		for _, tid := range tids {
			if got := policyOf(t, tid); got != p {
				t.Errorf("%s: thread %d at policy %d, want %d", when, tid, got, p)
			}
		}
	}
	want("started while yielding", unix.SCHED_IDLE)
	trialStub(pid, true)
	want("listed while yielding", unix.SCHED_IDLE)
	y.off()
	want("after the yield", own)
	y.on()
	want("in a second yield", unix.SCHED_IDLE)
	trialStub(pid, false)
	y.off()
	want("off the list, after the yield", unix.SCHED_IDLE)
	// Listed while tprec does not yield: tprec's own policy.
	trialStub(pid, true)
	want("listed outside a yield", own)
	trialStub(pid, false)
}

// The reader passes through the scheduler every schedPassEvery once it has
// looked often for twice that, and not while it waits longer: a look every
// 2 ms for 40 ms makes a pass at 8 ms and every 4 ms after; a long wait
// ends the streak, and the next one starts from nothing.
func TestSchedPass(t *testing.T) {
	var p schedPass
	t0 := time.Unix(1000, 0)
	var at []time.Duration
	look := func(d time.Duration, often bool) {
		if p.due(often, t0.Add(d)) {
			at = append(at, d)
		}
	}
	for d := time.Duration(0); d <= 40*time.Millisecond; d += 2 * time.Millisecond {
		look(d, true)
	}
	want := []time.Duration{8, 12, 16, 20, 24, 28, 32, 36, 40}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(at, want) {
		t.Fatalf("passes at %v, want %v", at, want)
	}
	at = nil
	look(50*time.Millisecond, false) // a wait of 8 ms or more
	for d := 60 * time.Millisecond; d <= 66*time.Millisecond; d += 2 * time.Millisecond {
		look(d, true)
	}
	if len(at) != 0 {
		t.Fatalf("passes at %v within 8 ms of a new streak", at)
	}
	look(68*time.Millisecond, true)
	if len(at) != 1 {
		t.Fatalf("no pass 8 ms into the new streak: %v", at)
	}
	at = nil
	for d := 100 * time.Millisecond; d <= 200*time.Millisecond; d += 64 * time.Millisecond {
		look(d, false) // an idle reader
	}
	if len(at) != 0 {
		t.Fatalf("an idle reader passed at %v", at)
	}
}
