// pipeworkers: the main thread hands numbered jobs to two worker threads
// through a pipe; each worker hashes its job with its own state and sends
// the result back through another pipe, and the main thread folds the
// results into a running total, sleeping 1 ms every 64 jobs. Every
// exchange between threads goes through a syscall (pipe reads and writes),
// so a replay that runs the threads one at a time in the recorded order of
// their calls computes the same values. It runs until killed.
//
// With the argument "timer", an interval timer raises SIGALRM every 3 ms,
// which a handler counts in the thread it lands in (SA_RESTART: an
// interrupted pipe read goes on), and the main thread also stirs each
// result with its count for a while in user code, where some of the
// signals land.
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

// Counted per thread: what a handler in one thread changes, no other
// thread reads.
static __thread volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static int jobs[2], results[2];

struct msg {
	uint64_t job, value;
};

static void *worker(void *arg)
{
	uint64_t state = (uintptr_t)arg * 0x9e3779b97f4a7c15ull;
	for (;;) {
		struct msg m;
		if (read(jobs[0], &m.job, sizeof m.job) != sizeof m.job)
			return NULL;
		for (int i = 0; i < 200; i++)
			state = state * 6364136223846793005ull + m.job + i;
		m.value = state;
		if (write(results[1], &m, sizeof m) != sizeof m)
			return NULL;
	}
}

int main(int argc, char **argv)
{
	int timer = argc > 1 && strcmp(argv[1], "timer") == 0;
	if (pipe(jobs) || pipe(results))
		return 1;
	pthread_t t[2];
	for (uintptr_t i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 1));
	if (timer) {
		struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
		sigaction(SIGALRM, &sa, NULL);
		struct itimerval it = {{0, 3000}, {0, 3000}};
		setitimer(ITIMER_REAL, &it, NULL);
	}
	uint64_t total = 0;
	struct timespec ms = {0, 1000000};
	for (uint64_t n = 1;; n++) {
		if (write(jobs[1], &n, sizeof n) != sizeof n)
			return 1;
		struct msg m;
		if (read(results[0], &m, sizeof m) != sizeof m)
			return 1;
		total = total * 31 + m.value + m.job;
		for (int i = 0; timer && i < 3000; i++)
			total = total * 6364136223846793005ull + i + alarms;
		if (n % 64 == 0) {
			nanosleep(&ms, NULL);
			if (n % (64 * 1024) == 0)
				printf("%llu\n", (unsigned long long)total);
		}
	}
}
