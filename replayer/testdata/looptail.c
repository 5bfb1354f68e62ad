// Fixture: after its last syscall it enters a loop at its second
// instruction, so that the first, the loop's tail, lies just before an
// address the program jumps to: the end search in the process must move
// that jump to its copy of the instruction (endsearch.go). A conditional
// jump goes one way or the other at alternate iterations. Registers differ
// at every iteration.
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
	unsigned long n = 0, x = 0;
	syscall(SYS_getppid, 0);
	syscall(SYS_getuid);
	__asm__ volatile(
		"	jmp 2f\n"
		"1:	add $3, %1\n"
		"2:	add $1, %0\n"
		"	bt $0, %0\n"
		"	jc 1b\n"
		"	add %0, %1\n"
		"	jmp 1b\n"
		: "+r"(n), "+r"(x));
	return 0;
}
