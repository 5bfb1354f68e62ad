/* Boundary cost as the target sees it: touch MB megabytes of private memory,
 * then read CLOCK_MONOTONIC in a tight loop for SECS seconds and report the
 * gaps longer than 200 us (each one is a stop: an interval boundary, or the
 * scheduler running something else). Gaps in the first WARM seconds (default
 * 1) are not counted: the boundary that closes the interval of the memset
 * copies the originals of every page it touched, once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "now.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	long mb = argc > 1 ? atol(argv[1]) : 10;
	double secs = argc > 2 ? atof(argv[2]) : 3;
	double warm = argc > 3 ? atof(argv[3]) : 1;
	size_t n = (size_t)mb << 20;
	char *p = malloc(n);
	if (!p)
		return 1;
	memset(p, 1, n);
	double gaps[4096];
	int ng = 0;
	double t0 = now(), last = t0;
	for (;;) {
		double t = now();
		if (t - last > 200e-6 && ng < 4096 && t - t0 > warm)
			gaps[ng++] = t - last;
		last = t;
		if (t - t0 > warm + secs)
			break;
	}
	qsort(gaps, ng, sizeof(gaps[0]), cmp);
	printf("stops %d median_ms %.3f p90_ms %.3f max_ms %.3f\n", ng, ng ? gaps[ng / 2] * 1e3 : 0,
	       ng ? gaps[ng * 9 / 10] * 1e3 : 0, ng ? gaps[ng - 1] * 1e3 : 0);
	return p[n / 2] == 1 ? 0 : 2;
}
