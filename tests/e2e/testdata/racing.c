// Two threads that meet between their calls in an order a replay does not
// keep. After 0.3 s of 1 ms sleeps (so that it happens in an interval
// replay can start from), the main thread wakes the other one through a
// pipe; that one spins 0.2 s (no call) and the main thread's next sleep
// (20 ms) returns meanwhile. A replay runs each thread on to its next call as
// soon as its call returns, so there the spin is over first. Then the main
// thread sleeps 0.6 s more in 1 ms steps and faults. The argument says what
// the spin is part of:
//   store: the other thread stores a value after its spin, and the main
//          thread copies that value to a page of its own: the old value in
//          the recording, the new one in a replay, eager or late (the
//          other thread's stretch starts and ends before the main
//          thread's in the log); the main thread writes that page again
//          before it faults, so the end compares it.
//   lock:  the other thread spins holding a mutex the main thread then asks
//          for: in the recording the main thread waits in futex and the
//          release wakes it, in a replay the mutex is free by then. The
//          other thread writes to a pipe once it holds the mutex; the main
//          thread reads it, sleeps 1 ms and asks. Without the pipe, on a
//          busy machine the other thread was not always running by then,
//          and the recording had another contention than this one; with a
//          flag polled between 1 ms sleeps instead, the number of sleeps
//          depended on when the other thread ran, which a replay does not
//          keep (it orders calls, not a flag polled between them). Without
//          the sleep after the read, a log that had the read return before
//          the write (the two end together) made a replay run the main
//          thread to the mutex while the other one still held it, waiting
//          to make its write.
//   lockspin: as lock, but the main thread spins 0.1 s (no call) between
//          waking the other thread and asking for the mutex, so that
//          replay runs the other thread's whole hold at once: the futex
//          wake of its release, which replay skips, is the call replay
//          resumed it for, and the call it makes instead (it blocks a
//          signal) is one replay executes for real.
//   late:  the main thread stores a value right after its next sleep
//          returns, while the other thread spins; the other thread copies
//          it after its spin. The recording copies the new value; a replay
//          that runs the other thread on as soon as its read returns
//          copies the old one, and one that runs it as late as its next
//          call (the late schedule) the new one.
// The spins are counted in iterations, calibrated against the clock when the
// program starts (a replay reads the same clock values, so it spins as many,
// the same time on the same machine):
// a fixed count took 0.2 s on one CPU and 30 ms on another, where a loaded
// machine kept the main thread off the CPU past the whole spin and the
// recording of lock had no contention at all.
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int p1[2], p2[2];
static int locking, spinning, late;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int clockv;
static long spin; // iterations of a volatile loop in 0.1 s
static struct {
	volatile int seen;
	volatile long last;
} state __attribute__((aligned(4096)));

static void *other(void *arg) {
	(void)arg;
	char c;
	if (read(p1[0], &c, 1) != 1)
		return NULL;
	if (locking) {
		pthread_mutex_lock(&lock);
		if (!spinning && write(p2[1], &c, 1) != 1)
			return NULL;
	}
	for (volatile long i = 0; i < 2 * spin; i++)
		;
	if (locking) {
		state.last++;
		pthread_mutex_unlock(&lock);
		if (spinning) {
			sigset_t s;
			sigemptyset(&s);
			sigaddset(&s, SIGUSR1);
			pthread_sigmask(SIG_BLOCK, &s, NULL);
		}
	} else if (late) {
		state.seen = clockv;
		if (write(p2[1], &c, 1) != 1)
			return NULL;
	} else {
		clockv = 1;
		// A call of its own between the store and the write: the log
		// then has it before the main thread's read returns, whichever
		// of the write and the read the recorder saw return first.
		(void)getppid();
		if (write(p2[1], &c, 1) != 1)
			return NULL;
	}
	for (;;)
		pause();
}

int main(int argc, char **argv) {
	spinning = argc > 1 && strcmp(argv[1], "lockspin") == 0;
	locking = spinning || (argc > 1 && strcmp(argv[1], "lock") == 0);
	late = argc > 1 && strcmp(argv[1], "late") == 0;
	// The fastest of several rounds: a round the machine's other load
	// interrupted would make the spins shorter.
	long best = 0;
	for (int r = 0; r < 8; r++) {
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (volatile long i = 0; i < 2000000L; i++)
			;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		long ns = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
		if (ns > 0 && (best == 0 || ns < best))
			best = ns;
	}
	spin = best > 0 ? 2000000L * 100000000L / best : 100000000L;
	pthread_t t;
	if (pipe(p1) || pipe(p2) || pthread_create(&t, NULL, other, NULL))
		return 1;
	struct timespec ms = {0, 1000000};
	// store and late: the other thread's read must be in the log before
	// this sleep returns. A 1 ms sleep did not always do on a loaded
	// machine, where the read's return was seen later, and a replay then
	// ran the other thread's spin after the main thread's store.
	struct timespec settle = {0, 20000000};
	for (int i = 0; i < 300; i++)
		nanosleep(&ms, NULL);
	char c = 'x';
	if (write(p1[1], &c, 1) != 1)
		return 1;
	if (spinning)
		for (volatile long i = 0; i < spin; i++)
			;
	else if (locking) {
		if (read(p2[0], &c, 1) != 1)
			return 1;
		nanosleep(&ms, NULL);
	} else
		nanosleep(&settle, NULL);
	if (locking) {
		pthread_mutex_lock(&lock);
		state.last++;
		pthread_mutex_unlock(&lock);
	} else if (late) {
		clockv = 1;
	} else {
		state.seen = clockv;
		if (read(p2[0], &c, 1) != 1)
			return 1;
	}
	for (int i = 0; i < 600; i++)
		nanosleep(&ms, NULL);
	state.last = 42;
	*(volatile int *)0 = 0;
	return 0;
}
