// Reads the clock N times (argv[1]) in each of two threads, through
// clock_gettime and gettimeofday, and prints every value it got with the
// thread's pthread_self (its fs base): the clock log's test compares them
// with the entries. It also makes calls the stubs do not log or log as
// errors, and a forked child reads the clock: none of that is logged.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int n;
static char *bufs[2];
static size_t lens[2];

static void *work(void *arg) {
	long id = (long)arg;
	size_t cap = (size_t)n * 128 + 4096, len = 0;
	char *b = malloc(cap);
	unsigned long self = (unsigned long)pthread_self();
	struct timespec ts;
	struct timeval tv;
	for (int i = 0; i < n; i++) {
		int clk = i % 2 ? CLOCK_REALTIME : CLOCK_MONOTONIC;
		int r = clock_gettime(clk, &ts);
		len += snprintf(b + len, cap - len, "C %lx %d %d %ld %ld\n", self, clk, r, (long)ts.tv_sec, ts.tv_nsec);
		r = gettimeofday(&tv, NULL);
		len += snprintf(b + len, cap - len, "G %lx %d %ld %ld\n", self, r, (long)tv.tv_sec, (long)tv.tv_usec);
	}
	// An error is logged, with nothing written.
	int r = clock_gettime(-100, &ts);
	len += snprintf(b + len, cap - len, "E %lx %d\n", self, r);
	// A timezone: not logged (the stub makes the syscall).
	struct timezone tz;
	gettimeofday(&tv, &tz);
	bufs[id] = b;
	lens[id] = len;
	return NULL;
}

int main(int argc, char **argv) {
	n = atoi(argv[1]);
	pthread_t t;
	pthread_create(&t, NULL, work, (void *)1);
	work(0);
	pthread_join(t, NULL);
	pid_t child = fork();
	if (child == 0) {
		struct timespec ts;
		for (int i = 0; i < 50; i++)
			clock_gettime(CLOCK_MONOTONIC, &ts);
		_exit(0);
	}
	waitpid(child, NULL, 0);
	fwrite(bufs[0], 1, lens[0], stdout);
	fwrite(bufs[1], 1, lens[1], stdout);
	return 0;
}
