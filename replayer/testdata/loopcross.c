// Fixture: after its last syscall it runs, for ever, a loop whose first
// instruction begins 6 bytes before the end of a page and ends in the next:
// the registers are the same at every pass, the count in memory only.
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

unsigned long count;

void spin(void);
__asm__(".text\n"
	".p2align 12\n"
	".skip 4090, 0xcc\n"
	".globl spin\n"
	".type spin, @function\n"
	"spin:\n"
	"	addq $1, count(%rip)\n"
	"	xorq %rax, %rax\n"
	"	jmp spin\n");

int main(void) {
	syscall(SYS_getppid, 0);
	syscall(SYS_getuid);
	spin();
}
