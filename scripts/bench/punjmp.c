// Times the loops of punjmp.S: ns a pass with a plain jmp to the end
// search's comparison, and with a punned one. The punned jmp lands where
// its rel32 says (its high bytes are the imul's): a page mapped there gets
// an absolute jmp to the comparison, as replayer/endsearch.go does.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

uint64_t loop_plain(long n), loop_punned(long n);
extern char head_punned[], compare_punned[];

#include "now.h"

int main(void) {
	int32_t rel;
	memcpy(&rel, head_punned + 1, 4);
	uint64_t to = (uint64_t)head_punned + 5 + (int64_t)rel;
	if (mmap((void *)(to & ~4095ul), 8192, PROT_READ | PROT_WRITE | PROT_EXEC,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == MAP_FAILED) {
		perror("mmap the landing page");
		return 1;
	}
	unsigned char *p = (unsigned char *)to;
	uint64_t target = (uint64_t)compare_punned;
	p[0] = 0xff, p[1] = 0x25; // jmp [rip+0]
	memset(p + 2, 0, 4);
	memcpy(p + 6, &target, 8);
	const long n = 50000000;
	double t0 = now();
	uint64_t a = loop_plain(n);
	double t1 = now();
	uint64_t b = loop_punned(n);
	double t2 = now();
	if (a != b) {
		fprintf(stderr, "the loops disagree: %lx %lx\n", (unsigned long)a, (unsigned long)b);
		return 1;
	}
	printf("plain %.2f ns a pass, punned %.2f ns a pass\n", (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9);
	return 0;
}
