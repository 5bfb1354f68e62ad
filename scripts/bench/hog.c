// hog keeps PCT percent of one CPU busy, in periods of PERIOD_US
// microseconds (busy, then asleep): a stand-in for a recorder's CPU use
// with nothing else of a recorder, for scripts/bench/cpushare.sh.
//
//	hog PCT PERIOD_US
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: hog PCT PERIOD_US\n");
		return 2;
	}
	long long pct = atoll(argv[1]), period = atoll(argv[2]) * 1000;
	long long busy = period * pct / 100, idle = period - busy;
	volatile unsigned long spins = 0;
	for (;;) {
		long long t0 = now_ns();
		while (now_ns() - t0 < busy)
			spins++;
		struct timespec s = {idle / 1000000000LL, idle % 1000000000LL};
		nanosleep(&s, NULL);
	}
}
