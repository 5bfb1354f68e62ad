// Two threads that meet between their calls in an order a replay does not
// keep. After 0.3 s of 1 ms sleeps (so that it happens in an interval
// replay can start from), the main thread wakes the other one through a
// pipe; that one spins 0.2 s (no call) and the main thread's next 1 ms
// sleep returns meanwhile. A replay runs each thread on to its next call as
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
//          main thread sleeps in 1 ms steps until the other one holds the
//          mutex (a flag it sets): on a busy machine the other thread was
//          not always running by the end of the first, the main thread
//          took the mutex first, and the recording had another contention
//          than the one this is about.
//   lockspin: as lock, but the main thread spins 0.1 s (no call) between
//          waking the other thread and asking for the mutex, so that
//          replay runs the other thread's whole hold at once: the futex
//          wake of its release, which replay skips, is the call replay
//          resumed it for, and the call it makes instead (it blocks a
//          signal) is one replay executes for real.
//   late:  the main thread stores a value right after its next 1 ms sleep
//          returns, while the other thread spins; the other thread copies
//          it after its spin. The recording copies the new value; a replay
//          that runs the other thread on as soon as its read returns
//          copies the old one, and one that runs it as late as its next
//          call (the late schedule) the new one.
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int p1[2], p2[2];
static int locking, spinning, late;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int clockv, held;
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
		held = 1;
	}
	for (volatile long i = 0; i < 100000000L; i++)
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
	pthread_t t;
	if (pipe(p1) || pipe(p2) || pthread_create(&t, NULL, other, NULL))
		return 1;
	struct timespec ms = {0, 1000000};
	for (int i = 0; i < 300; i++)
		nanosleep(&ms, NULL);
	char c = 'x';
	if (write(p1[1], &c, 1) != 1)
		return 1;
	if (spinning)
		for (volatile long i = 0; i < 50000000L; i++)
			;
	else
		do
			nanosleep(&ms, NULL);
		while (locking && !held);
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
