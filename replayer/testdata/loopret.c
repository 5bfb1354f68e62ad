// Fixture: after its last syscall it calls two functions in a loop, the
// second starting right after the first one's `ret`. Where the recording
// ends just before that `ret`, the end search in the process displaces the
// second function's first instruction too, and every call to it would
// stop, but for the call being made to go to their copy. Where it ends at
// the `ret` itself, the search compares where the `ret` returns to instead.
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

unsigned long count, other;

void bump(void);
void zero(void);
__asm__(".text\n"
	".globl bump\n"
	"bump:\n"
	"	addq $1, count(%rip)\n"
	"	xorl %ecx, %ecx\n"
	"	ret\n"
	".globl zero\n"
	"zero:\n"
	"	xorl %eax, %eax\n"
	"	ret\n"
	"	.byte 0x0f, 0x1f, 0x40, 0x00\n"); // a nop, never run

int main(void) {
	syscall(SYS_getppid, 0);
	syscall(SYS_getuid);
	for (;;) {
		bump();
		*(volatile unsigned long *)&other = 0;
		zero();
	}
}
