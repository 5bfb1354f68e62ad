// Copies 32 MB back and forth with one `rep movsb`, calling getppid between
// copies: a signal from outside almost always lands inside the copy, between
// two of its iterations.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
	size_t n = 32 << 20;
	char *a = malloc(n), *b = malloc(n);
	memset(a, 1, n);
	memset(b, 2, n);
	for (unsigned i = 0;; i++) {
		char *d = (i & 1) ? a : b, *s = (i & 1) ? b : a;
		size_t c = n - (i % 4096);
		__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(c) : : "memory");
		getppid();
	}
}
