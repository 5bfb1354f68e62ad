// clockloop: reads the clock in a tight loop for the given number of seconds
// and exits 0. Recorded, nearly all of its time is spent in the patched
// vDSO's clock_gettime (a real syscall then), so a stop for a detach lands
// inside the patched code far more often than not.
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	return 0;
}
