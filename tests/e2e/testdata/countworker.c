// The main thread counts in memory with `lock add`, its registers the same
// at every pass; a worker polls with a 1 ms timeout. A crash sent to the
// worker ends the recording with the main thread somewhere in its count.
#include <poll.h>
#include <pthread.h>
#include <stdio.h>

static long count;

static void *worker(void *arg) {
	(void)arg;
	for (;;)
		poll(NULL, 0, 1);
	return NULL;
}

int main(void) {
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 1;
	printf("ready\n");
	fflush(stdout);
	for (;;)
		__atomic_fetch_add(&count, 1, __ATOMIC_RELAXED);
}
