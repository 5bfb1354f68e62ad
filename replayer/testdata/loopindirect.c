// Fixture: as loopcall.c, but the loop calls its function through a
// pointer, an indirect call (`call *%reg` or `call *mem`) right after a
// short instruction: where the recording ends at one of those, the end
// search in the process moves the indirect call too (as a push of its
// return address and a jmp through the same operand).
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long count;

__attribute__((noinline)) static void work(volatile unsigned long *c) {
	__asm__ volatile("" ::: "memory");
	(void)c;
}

static void (*volatile fn)(volatile unsigned long *) = work;

int main(void) {
	syscall(SYS_getppid, 0);
	syscall(SYS_getuid);
	void (*f)(volatile unsigned long *) = fn;
	for (;;) {
		__asm__ volatile("addq $1, %0\n\txorl %%eax, %%eax" : "+m"(count) : : "eax", "cc");
		f(&count);
	}
}
