// pipeworkers: the main thread hands numbered jobs to two worker threads
// through a pipe; each worker hashes its job with its own state and sends
// the result back through another pipe, and the main thread folds the
// results into a running total, sleeping 1 ms every 64 jobs. Every
// exchange between threads goes through a syscall (pipe reads and writes),
// so a replay that runs the threads one at a time in the recorded order of
// their calls computes the same values. It runs until killed.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

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

int main(void)
{
	if (pipe(jobs) || pipe(results))
		return 1;
	pthread_t t[2];
	for (uintptr_t i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, (void *)(i + 1));
	uint64_t total = 0;
	struct timespec ms = {0, 1000000};
	for (uint64_t n = 1;; n++) {
		if (write(jobs[1], &n, sizeof n) != sizeof n)
			return 1;
		struct msg m;
		if (read(results[0], &m, sizeof m) != sizeof m)
			return 1;
		total = total * 31 + m.value + m.job;
		if (n % 64 == 0) {
			nanosleep(&ms, NULL);
			if (n % (64 * 1024) == 0)
				printf("%llu\n", (unsigned long long)total);
		}
	}
}
