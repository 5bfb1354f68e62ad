// spawner: the main thread starts a thread per job, which hashes the job
// and writes the result into a pipe; the main thread reads it, joins the
// thread and folds the result into a running total, sleeping 1 ms every 16
// jobs. Threads start and end all the time, as in a server that runs a
// thread per request. Given a number of seconds, it then writes through a
// null pointer, between two jobs (no job thread left); else it runs until
// killed. With "nested" after the seconds, each job thread starts a thread
// of its own to do the job and joins it: threads started in the window
// start threads too.
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int results[2];

static void *job(void *arg)
{
	uint64_t n = (uintptr_t)arg, state = n * 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 500; i++)
		state = state * 6364136223846793005ull + n + i;
	if (write(results[1], &state, sizeof state) != sizeof state)
		return NULL;
	return (void *)(uintptr_t)(state & 0xff);
}

static void *nested(void *arg)
{
	pthread_t t;
	void *low;
	if (pthread_create(&t, NULL, job, arg))
		return NULL;
	pthread_join(t, &low);
	return low;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (pipe(results))
		return 1;
	double until = argc > 1 ? now() + atof(argv[1]) : 0;
	void *(*start)(void *) = argc > 2 && strcmp(argv[2], "nested") == 0 ? nested : job;
	uint64_t total = 0;
	struct timespec ms = {0, 1000000};
	for (uintptr_t n = 1;; n++) {
		if (until && n % 16 == 0 && now() > until)
			*(volatile uint64_t *)(uintptr_t)(total & 0xff) = total;
		pthread_t t;
		if (pthread_create(&t, NULL, start, (void *)n))
			return 1;
		uint64_t v;
		if (read(results[0], &v, sizeof v) != sizeof v)
			return 1;
		void *low;
		pthread_join(t, &low);
		total = total * 31 + v + (uintptr_t)low;
		if (n % 16 == 0)
			nanosleep(&ms, NULL);
	}
}
