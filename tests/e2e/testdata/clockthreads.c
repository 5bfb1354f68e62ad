// Four threads reading the clock between calls of their own: runs of
// clock_gettime and gettimeofday of each thread, interleaved with the
// others' in the log. A replay completes each thread's runs in the process
// (replayer/clock.go) while the others wait.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static void *work(void *arg) {
	long id = (long)arg, sum = 0;
	struct timespec ts;
	struct timeval tv;
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		gettimeofday(&tv, NULL);
		clock_gettime(CLOCK_REALTIME, &ts);
		sum += (ts.tv_nsec ^ tv.tv_usec) & id;
		usleep(100 + 50 * id);
	}
	return (void *)sum;
}

int main(void) {
	pthread_t t[3];
	for (long i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, work, (void *)(i + 1));
	printf("ready\n");
	fflush(stdout);
	work(0);
	return 0;
}
