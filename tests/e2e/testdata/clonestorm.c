// clonestorm: three threads start and join empty threads as fast as they
// can while the main thread, after the given number of seconds, writes
// through a null pointer: the crash ends the group while clones are under
// way, some of them before their parent could report them to a tracer.
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *empty(void *arg) { return arg; }

static void *storm(void *arg)
{
	for (;;) {
		pthread_t t;
		if (pthread_create(&t, NULL, empty, arg) == 0)
			pthread_join(t, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1;
	for (int i = 0; i < 3; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, storm, NULL))
			return 1;
	}
	struct timespec d = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
	nanosleep(&d, NULL);
	*(volatile int *)(uintptr_t)(argc + 14) = 1; /* a page nothing maps */
	return 0;
}
