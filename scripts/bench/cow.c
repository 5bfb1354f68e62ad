// What a copy-on-write fault costs on this machine (by hand: gcc -O2 -o
// /tmp/cow scripts/bench/cow.c && /tmp/cow). After each interval boundary's
// fork of the shadow, the recorded process pays one such fault for the
// first write to every page it writes; 2,300 pages is what a redis-server
// under load writes per 250 ms interval. Also measured: breaking the
// sharing ahead with madvise(MADV_POPULATE_WRITE), which costs as much;
// and, as the other way to learn which pages an interval writes, a
// userfaultfd write-protection resolved by the kernel itself
// (UFFD_FEATURE_WP_ASYNC, Linux 6.7) with the written pages read and
// protected again by the PAGEMAP_SCAN ioctl: a first write then costs a
// fault without a copy, and no fork is needed to see it (the originals
// would have to be copied some other way).
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// From Linux 6.7's uapi headers, which Debian 12's do not have.
struct pm_scan_arg {
	uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
	uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct page_region { uint64_t start, end, categories; };
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PM_SCAN_WP_MATCHING 1
#define PM_SCAN_CHECK_WPASYNC 2
#define PAGE_IS_WRITTEN 2
#define FEATURE_WP_UNPOPULATED (1 << 13)
#define FEATURE_WP_ASYNC (1 << 15)

#include "now.h"

static void touch(char *p, size_t n) {
	for (size_t i = 0; i < n; i++)
		p[i * 4096]++;
}

int main(void) {
	size_t n = 2300, sz = n * 4096;
	char *p = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(p, 1, sz);
	for (int round = 0; round < 5; round++) {
		double t0 = now();
		touch(p, n);
		double plain = now() - t0;
		t0 = now();
		pid_t c = fork();
		if (c == 0) { pause(); _exit(0); }
		double forked = now() - t0;
		t0 = now();
		touch(p, n);
		double cow = now() - t0;
		kill(c, 9); waitpid(c, 0, 0);
		pid_t c2 = fork();
		if (c2 == 0) { pause(); _exit(0); }
		t0 = now();
		madvise(p, sz, 23 /* MADV_POPULATE_WRITE */);
		double pop = now() - t0;
		t0 = now();
		touch(p, n);
		double after = now() - t0;
		kill(c2, 9); waitpid(c2, 0, 0);
		printf("plain %.2f ms, fork %.2f ms, after fork %.2f ms (%.2f us/page), populate_write %.2f ms, writes after it %.2f ms\n",
		       plain * 1e3, forked * 1e3, cow * 1e3, cow * 1e6 / n, pop * 1e3, after * 1e3);
	}

	int uffd = syscall(SYS_userfaultfd, O_CLOEXEC | 1 /* UFFD_USER_MODE_ONLY */);
	struct uffdio_api api = { .api = UFFD_API, .features = FEATURE_WP_ASYNC | FEATURE_WP_UNPOPULATED };
	struct uffdio_register reg = { .range = { (uintptr_t)p, sz }, .mode = UFFDIO_REGISTER_MODE_WP };
	int pm = open("/proc/self/pagemap", O_RDONLY);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) || ioctl(uffd, UFFDIO_REGISTER, &reg) || pm < 0) {
		perror("userfaultfd write-protection resolved by the kernel (Linux 6.7)");
		return 0;
	}
	struct page_region *vec = calloc(n, sizeof *vec);
	for (int round = 0; round < 5; round++) {
		struct pm_scan_arg a = { .size = sizeof a, .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
			.start = (uintptr_t)p, .end = (uintptr_t)p + sz, .vec = (uintptr_t)vec, .vec_len = n,
			.category_mask = PAGE_IS_WRITTEN, .return_mask = PAGE_IS_WRITTEN };
		double t0 = now();
		long r = ioctl(pm, PAGEMAP_SCAN, &a);
		double scan = now() - t0;
		long pages = 0;
		for (long i = 0; i < r; i++)
			pages += (vec[i].end - vec[i].start) / 4096;
		t0 = now();
		touch(p, n);
		double wp = now() - t0;
		printf("PAGEMAP_SCAN of the written pages, protecting them again: %.2f ms (%ld pages); first writes after it %.2f us/page\n",
		       scan * 1e3, pages, wp * 1e6 / n);
	}
}
