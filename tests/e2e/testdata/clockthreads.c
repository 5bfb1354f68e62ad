// Four threads reading the clock between calls of their own, taking turns:
// each waits for a byte on its pipe, reads the clock three ways, sleeps a
// little and passes the byte on to the next thread's pipe. Each thread's run
// is whole in the log and the runs of the four alternate, however the
// recording was scheduled: with free-running threads, a recording under
// ptrace on a loaded machine interleaved every call with another thread's,
// leaving the replay nothing it could complete in the process. A replay
// completes each thread's runs in the process (replayer/inprocess.go) while
// the other three wait in their read.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int pipes[4][2];

static void *work(void *arg) {
	long id = (long)arg, sum = 0;
	struct timespec ts;
	struct timeval tv;
	char token;
	for (;;) {
		if (read(pipes[id][0], &token, 1) != 1)
			exit(1);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		gettimeofday(&tv, NULL);
		clock_gettime(CLOCK_REALTIME, &ts);
		sum += (ts.tv_nsec ^ tv.tv_usec) & (id + 1);
		usleep(100 + 50 * id);
		if (write(pipes[(id + 1) % 4][1], &token, 1) != 1)
			exit(1);
	}
	return (void *)sum;
}

int main(void) {
	pthread_t t[3];
	for (int i = 0; i < 4; i++)
		if (pipe(pipes[i]) != 0)
			return 1;
	for (long i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, work, (void *)(i + 1));
	printf("ready\n");
	fflush(stdout);
	if (write(pipes[0][1], "t", 1) != 1)
		return 1;
	work(0);
	return 0;
}
