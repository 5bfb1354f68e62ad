// now: CLOCK_MONOTONIC in seconds, for the measuring programs of this
// directory (each is built alone with gcc; the include is found beside it).
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}
