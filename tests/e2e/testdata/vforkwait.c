// vforkwait: a main thread that reads the clock in a loop and reports its
// longest pause, while a second thread spends most of its time in vfork,
// waiting for a child that sleeps before it exits. A thread waiting for its
// vfork child sleeps uninterruptibly: PTRACE_INTERRUPT stops it only when the
// child is done. A recorder that held the main thread until every thread had
// stopped would pause it for as long.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *spawner(void *arg)
{
	(void)arg;
	for (;;) {
		pid_t p = vfork();
		if (p == 0) {
			// Only async-signal-safe calls in a vfork child.
			struct timespec d = {1, 0};
			nanosleep(&d, NULL);
			_exit(0);
		}
		if (p > 0)
			waitpid(p, NULL, 0);
		usleep(200000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 6;
	pthread_t t;
	pthread_create(&t, NULL, spawner, NULL);
	double start = now(), last = start, worst = 0;
	while (last - start < secs) {
		usleep(500);
		double n = now();
		if (n - last > worst)
			worst = n - last;
		last = n;
	}
	fprintf(stderr, "longest pause %.3f s\n", worst);
	return 0;
}
