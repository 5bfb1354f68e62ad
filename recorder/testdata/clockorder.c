// Four threads, each N times (argv[1]): read the clock, publish the value
// in a shared word, read the word (its own value or another thread's) and
// make a syscall with what it read as first argument. The clock log's
// order test checks that each thread's reads and calls alternate in the
// merged order, and that a call comes after the read whose value it saw.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int n;
static volatile long shared;

static void *work(void *arg) {
	struct timespec ts;
	for (int i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		__atomic_store_n(&shared, ts.tv_sec * 1000000000L + ts.tv_nsec, __ATOMIC_SEQ_CST);
		long v = __atomic_load_n(&shared, __ATOMIC_SEQ_CST);
		syscall(SYS_getppid, v);
	}
	return NULL;
}

int main(int argc, char **argv) {
	n = atoi(argv[1]);
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, work, NULL);
	work(NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	return 0;
}
