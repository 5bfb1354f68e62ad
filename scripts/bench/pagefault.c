// What the first touch of fresh anonymous memory costs here (by hand: gcc
// -O2 -o /tmp/pagefault scripts/bench/pagefault.c && /tmp/pagefault): 64 MiB
// touched a page at a time, after madvise(MADV_HUGEPAGE), after
// madvise(MADV_POPULATE_WRITE), and both; microseconds per 4 KiB page. A
// dump allocates most of its memory fresh (the assembled log, the writer's
// buffers), so this figure times a part of every dump.
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#include "now.h"

int main(void)
{
	const size_t sz = 64 << 20, huge = 2 << 20;
	const char *names[] = {"touch", "MADV_HUGEPAGE, touch", "MADV_POPULATE_WRITE", "MADV_HUGEPAGE, MADV_POPULATE_WRITE"};
	for (int mode = 0; mode < 4; mode++) {
		char *m = mmap(0, sz + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		char *p = (char *)(((unsigned long)m + huge - 1) & ~(huge - 1));
		double a = now();
		if (mode == 1 || mode == 3)
			madvise(p, sz, MADV_HUGEPAGE);
		if (mode >= 2)
			madvise(p, sz, MADV_POPULATE_WRITE);
		for (size_t i = 0; i < sz; i += 4096)
			p[i] = 1;
		printf("%-36s %.2f us per 4 KiB page\n", names[mode], (now() - a) * 1e6 / (sz / 4096));
		munmap(m, sz + huge);
	}
	return 0;
}
