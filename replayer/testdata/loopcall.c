// Fixture: after its last syscall it calls a function in a loop whose
// registers, flags too, are the same at every pass (but before its xor), its
// count in memory only, with the call right after a short instruction:
// where the recording ends at one of those, the end search in the process
// moves the call too, and tells the passes apart by the count (a memory
// word it compares itself).
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long count;

__attribute__((noinline)) static void work(volatile unsigned long *c) {
	__asm__ volatile("" ::: "memory");
	(void)c;
}

int main(void) {
	syscall(SYS_getppid, 0);
	syscall(SYS_getuid);
	for (;;) {
		// One add to memory: no register holds the count; then flags
		// that are the same at every pass.
		__asm__ volatile("addq $1, %0\n\txorl %%eax, %%eax" : "+m"(count) : : "eax", "cc");
		work(&count);
	}
}
