// Counts in shared writable memory: a MAP_SHARED anonymous page and a page of
// a file mapped MAP_SHARED. Every iteration bumps both counters and writes
// them to /dev/null, so a replay that starts from the wrong content of either
// page makes different calls or ends with different memory.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 10;
	char path[] = "/tmp/sharedcount-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || ftruncate(fd, 2 * 4096) != 0) {
		perror("temporary file");
		return 1;
	}
	unlink(path);
	unsigned long *anon = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	unsigned long *file = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (anon == MAP_FAILED || file == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	int out = open("/dev/null", O_WRONLY);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned long i = 0;; i++) {
		anon[i % 1024]++;
		file[512 + i % 512] += anon[i % 1024];
		char buf[64];
		int n = snprintf(buf, sizeof buf, "%lu %lu\n", anon[0] * 7 + anon[i % 1024], file[512 + i % 512]);
		if (write(out, buf, n) != n)
			return 1;
		if (i % 16 == 0)
			usleep(200);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec + (now.tv_nsec - t0.tv_nsec) / 1e9 > secs)
			break;
	}
	printf("%lu\n", anon[0]);
	return 0;
}
