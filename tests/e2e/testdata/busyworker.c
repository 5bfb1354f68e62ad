// busyworker: the main thread hands numbered jobs to a worker thread
// through a pipe and waits for each result; the worker computes for about
// ten milliseconds between its calls, storing every intermediate value
// into memory. The main thread spends its time blocked in read, so a crash
// of the main thread sent from outside finds the worker computing, between
// two of its calls. The computation's loop body is long (1,024 steps
// written out), so that any one instruction of it runs only once an
// iteration. It runs until killed. Built with -DTIGHT the loop is one
// step an iteration instead, 100,000 times: scripts/bench/threads.sh
// measures with it what a replay pays for each pass at the instruction
// where the worker is stopped.
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

static int jobs[2], results[2];
static volatile uint64_t progress;

#define STEP                                                \
	state = state * 6364136223846793005ull + i;         \
	progress = state;
#define S4 STEP STEP STEP STEP
#define S16 S4 S4 S4 S4
#define S64 S16 S16 S16 S16
#define S256 S64 S64 S64 S64
#define S1024 S256 S256 S256 S256
#ifdef TIGHT
#define BODY STEP
#define ITERS 100000
#else
#define BODY S1024
#define ITERS 5000
#endif

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		uint64_t job, state;
		if (read(jobs[0], &job, sizeof job) != sizeof job)
			return NULL;
		state = job;
		for (uint64_t i = 0; i < ITERS; i++) {
			BODY
		}
		if (write(results[1], &state, sizeof state) != sizeof state)
			return NULL;
	}
}

int main(void)
{
	if (pipe(jobs) || pipe(results))
		return 1;
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	uint64_t total = 0;
	for (uint64_t n = 1;; n++) {
		if (write(jobs[1], &n, sizeof n) != sizeof n)
			return 1;
		uint64_t v;
		if (read(results[0], &v, sizeof v) != sizeof v)
			return 1;
		total = total * 31 + v;
	}
}
