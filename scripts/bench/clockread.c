// What a clock read costs a recorded program, against a syscall (by hand:
// gcc -O2 -o /tmp/clockread scripts/bench/clockread.c, then for each MODE
// `taskset -c 0 /tmp/clockread SPIN MODE` unrecorded and
// `taskset -c 1 bin/tprec -q -o /tmp/ck -- taskset -c 0 /tmp/clockread SPIN MODE`
// recorded, tprec on the other CPU). Each iteration spins SPIN additions;
// MODE 0 also reads CLOCK_MONOTONIC and makes a getppid every third
// iteration, MODE 1 makes the getppid only, MODE 2 reads the clock only.
// Mode 0 minus mode 1 is a clock read among calls, as in a server; mode 2
// alone is a loop that reads the clock and nothing else, where the clock
// log's ring fills between the collector's merges (which follow calls) and
// the reads fall back to syscalls. Prints the best of three rounds' ns an
// iteration.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "now.h"

volatile unsigned long sink;

int main(int argc, char **argv)
{
	int spin = argc > 1 ? atoi(argv[1]) : 1000, mode = argc > 2 ? atoi(argv[2]) : 0;
	double best = 0;
	sleep(1);
	for (int r = 0; r < 3; r++) {
		int n = 300000;
		struct timespec t;
		double a = now();
		for (int i = 0; i < n; i++) {
			if (mode != 1)
				clock_gettime(CLOCK_MONOTONIC, &t);
			for (int k = 0; k < spin; k++)
				sink += k;
			if (mode != 2 && i % 3 == 0)
				getppid();
		}
		double ns = (now() - a) * 1e9 / n;
		if (r == 0 || ns < best)
			best = ns;
	}
	printf("%.1f ns/iter\n", best);
	return 0;
}
