// Exercises each way a kept shadow's originals can go wrong
// (recorder/kept.go). What it reads decides which calls it makes, so a page
// replayed with the wrong content makes a call the recording does not
// have. Times are from when tprec has attached (its TracerPid is set), after
// it prints "ready".
//   - heap, filled before "ready": one page in eight rewritten in turn, the
//     others keeping their content interval after interval.
//   - late, mapped and filled at 0.6 s, after the first shadow: rewritten
//     in turn. The shadow has no page there, yet a page's content at an
//     interval start is not zeros.
//   - dropped, mapped and filled at 0.7 s: read and dropped with
//     madvise(MADV_DONTNEED) at 1.3 s, then left alone for 0.4 s: at the
//     boundary after, neither process has the page, and its original is
//     what was read.
//   - gone, filled before "ready": dropped at 1.8 s and left alone for
//     0.4 s: a page the shadow has and the target no longer has at a
//     boundary, which has the shadow forked again.
// It makes no other memory call, so the shadow is forked again there only.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PG 4096

static double since(const struct timespec *t0) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec - t0->tv_sec + (t.tv_nsec - t0->tv_nsec) / 1e9;
}

static int traced(void) {
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	char *p = strstr(buf, "TracerPid:");
	return p && atoi(p + 10) != 0;
}

static unsigned char *anon(int pages) {
	return mmap(NULL, pages * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

int main(void) {
	volatile unsigned char *heap = anon(256), *gone = anon(16), *late = NULL, *dropped = NULL;
	for (int p = 0; p < 256; p++)
		heap[p * PG] = 1;
	for (int p = 0; p < 16; p++)
		gone[p * PG] = 9;
	double dropped_at = 0, gone_at = 0;
	printf("ready\n");
	fflush(stdout);
	while (!traced())
		usleep(1000);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0;; i++) {
		double t = since(&t0);
		unsigned off = (i % 32) * 8 * PG;
		unsigned char v = heap[off];
		heap[off] = v + 3;
		if (v % 5 == 0)
			syscall(SYS_getppid);
		if (!late && t > 0.6) {
			late = anon(32);
			for (int p = 0; p < 32; p++)
				late[p * PG] = 200;
		}
		if (late) {
			off = (i % 32) * PG;
			v = late[off];
			late[off] = v + 7;
			if (v % 3 == 0)
				syscall(SYS_getuid);
		}
		if (!dropped && t > 0.7) {
			dropped = anon(16);
			for (int p = 0; p < 16; p++)
				dropped[p * PG] = 50;
		}
		if (dropped && !dropped_at && t > 1.3) {
			if (dropped[PG] == 50)
				syscall(SYS_getpgrp);
			madvise((void *)dropped, 16 * PG, MADV_DONTNEED);
			dropped_at = t;
		}
		if (dropped_at && t > dropped_at + 0.4) {
			if (dropped[PG] != 0)
				syscall(SYS_getpid);
			dropped_at = 1e9;
		}
		if (!gone_at && t > 1.8) {
			madvise((void *)gone, 16 * PG, MADV_DONTNEED);
			gone_at = t;
		}
		if (gone_at && t > gone_at + 0.4) {
			if (gone[PG] != 0)
				syscall(SYS_getpid);
			gone_at = 1e9;
		}
		struct timespec ts = {0, 500 * 1000};
		nanosleep(&ts, NULL);
	}
}
