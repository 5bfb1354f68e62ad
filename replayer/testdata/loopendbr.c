// Fixture: after its last syscall it calls, in a loop, a function whose
// first instruction is a 4-byte endbr64, as OPENSSL_cleanse in Debian's
// libcrypto (endbr64, xor, cmp, jae...): the registers at its entry are the
// same at every call, its caller's count in memory only.
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long count;

void cleanse(void *p, unsigned long n);
__asm__(".text\n"
	".globl cleanse\n"
	".type cleanse, @function\n"
	"cleanse:\n"
	"	endbr64\n"
	"	xorq %rax, %rax\n"
	"	cmpq $15, %rsi\n"
	"	jae 2f\n"
	"	cmpq $0, %rsi\n"
	"	je 1f\n"
	"3:	movb %al, (%rdi)\n"
	"	subq $1, %rsi\n"
	"	leaq 1(%rdi), %rdi\n"
	"	jne 3b\n"
	"1:	ret\n"
	"2:	ret\n");

int main(void) {
	char buf[8];
	syscall(SYS_getppid, 0);
	syscall(SYS_getuid);
	for (;;) {
		__asm__ volatile("addq $1, %0" : "+m"(count) : : "cc");
		cleanse(buf, sizeof buf);
	}
}
