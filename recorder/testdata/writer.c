/* Writes every page of a private anonymous buffer, and reads /dev/urandom
 * into another (the kernel writes those pages: faults in kernel mode), over
 * and over for 1.5 s, so that every recording interval sees the same
 * written set through page faults and through /proc/PID/pagemap, and
 * every page changes in every interval. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGES 64

int main(void)
{
	char *a = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *b = mmap(NULL, PAGES * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED || b == MAP_FAILED)
		return 1;
	memset(a, 1, PAGES * 4096);
	memset(b, 1, PAGES * 4096);
	int fd = open("/dev/urandom", O_RDONLY);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned n = 0;; n++) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec + (now.tv_nsec - t0.tv_nsec) / 1e9 > 1.5)
			return 0;
		for (int i = 0; i < PAGES; i++)
			a[i * 4096] = (char)n;
		if (read(fd, b, PAGES * 4096) <= 0)
			return 2;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}
