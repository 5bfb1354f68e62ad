// Two threads meet through memory between their calls in an order a replay
// does not keep. The ticker's read returns, then it spins (no call) before
// storing a new clock value; meanwhile the main thread's 1 ms sleep
// returns and it copies the clock, still the old value, to a page of its
// own (after 0.3 s of 1 ms sleeps, so that it happens in an interval
// replay can start from). A replay runs each thread on to its next call as soon as its call
// returns, so there the ticker stores first and the copy differs. The main
// thread then sleeps in 1 ms steps for 0.6 s (intervals that replay
// well), writes that page again and faults: the end compares the page.
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static int p1[2], p2[2];
static volatile int clockv;
static struct {
	volatile int seen;
	volatile long last;
} state __attribute__((aligned(4096)));

static void *ticker(void *arg) {
	(void)arg;
	char c;
	if (read(p1[0], &c, 1) != 1)
		return NULL;
	for (volatile long i = 0; i < 100000000L; i++)
		;
	clockv = 1;
	if (write(p2[1], &c, 1) != 1)
		return NULL;
	for (;;)
		pause();
}

int main(void) {
	pthread_t t;
	if (pipe(p1) || pipe(p2) || pthread_create(&t, NULL, ticker, NULL))
		return 1;
	struct timespec ms = {0, 1000000};
	for (int i = 0; i < 300; i++)
		nanosleep(&ms, NULL);
	char c = 'x';
	if (write(p1[1], &c, 1) != 1)
		return 1;
	nanosleep(&ms, NULL);
	state.seen = clockv;
	if (read(p2[0], &c, 1) != 1)
		return 1;
	for (int i = 0; i < 600; i++)
		nanosleep(&ms, NULL);
	state.last = 42;
	*(volatile int *)0 = 0;
	return 0;
}
