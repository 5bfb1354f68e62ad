// Calls the vDSO's clock_gettime and gettimeofday (patched by the test)
// with every register, the flags and the 512 bytes below the stack pointer
// set to known values, and checks that the call leaves them as the vDSO
// patch's stub (`mov eax, NR; syscall; ret`) does: rax the result, rcx the
// rip after that `syscall` (entry + 7), r11 the flags, everything else as
// it was. Exits 1 with a message on the first difference.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

unsigned long fn, a0, a1, flags, got[16], stackbad;

void probe(void);
asm(".intel_syntax noprefix\n"
    "probe:\n"
    "  push rbx; push rbp; push r12; push r13; push r14; push r15\n"
    "  xor eax, eax; stc; pushfq; pop rax; mov [rip+flags], rax\n"
    "  movabs rax, 0x5a5a5a5a5a5a5a5a\n"
    "  lea rcx, [rsp-512]\n"
    "1: mov [rcx], rax; add rcx, 8; cmp rcx, rsp; jb 1b\n"
    "  mov rdi, [rip+a0]; mov rsi, [rip+a1]\n"
    "  movabs rdx, 0x1111111111111111; movabs r8, 0x8888888888888888\n"
    "  movabs r9, 0x9999999999999999; movabs r10, 0xaaaaaaaaaaaaaaaa\n"
    "  movabs rbx, 0xbbbbbbbbbbbbbbbb; movabs rbp, 0xcccccccccccccccc\n"
    "  movabs r12, 0x1212121212121212; movabs r13, 0x1313131313131313\n"
    "  movabs r14, 0x1414141414141414; movabs r15, 0x1515151515151515\n"
    "  xor eax, eax; stc\n"
    "  call [rip+fn]\n"
    "  mov [rip+got], rax; mov [rip+got+8], rcx; mov [rip+got+16], r11\n"
    "  mov [rip+got+24], rdx; mov [rip+got+32], rsi; mov [rip+got+40], rdi\n"
    "  mov [rip+got+48], r8; mov [rip+got+56], r9; mov [rip+got+64], r10\n"
    "  mov [rip+got+72], rbx; mov [rip+got+80], rbp; mov [rip+got+88], r12\n"
    "  mov [rip+got+96], r13; mov [rip+got+104], r14; mov [rip+got+112], r15\n"
    "  mov rax, 0; lahf; seto al; mov [rip+got+120], rax\n"
    "  movabs rax, 0x5a5a5a5a5a5a5a5a\n"
    "  lea rcx, [rsp-512]\n"
    "2: cmp [rcx], rax; jne 3f; add rcx, 8; lea rdx, [rsp-8]; cmp rcx, rdx; jb 2b\n"
    "  xor ecx, ecx\n"
    "3: mov [rip+stackbad], rcx\n"
    "  pop r15; pop r14; pop r13; pop r12; pop rbp; pop rbx\n"
    "  ret\n"
    ".att_syntax\n");

static const char *names[] = {"rax", "rcx", "r11", "rdx", "rsi", "rdi", "r8", "r9", "r10", "rbx", "rbp", "r12", "r13", "r14", "r15", "flags"};

static void check(const char *what, void *f, unsigned long x0, unsigned long x1) {
	fn = (unsigned long)f, a0 = x0, a1 = x1;
	probe();
	unsigned long want[16] = {0, fn + 7, flags, 0x1111111111111111, x1, x0, 0x8888888888888888, 0x9999999999999999,
				  0xaaaaaaaaaaaaaaaa, 0xbbbbbbbbbbbbbbbb, 0xcccccccccccccccc, 0x1212121212121212,
				  0x1313131313131313, 0x1414141414141414, 0x1515151515151515, 0};
	// lahf after xor eax, eax; stc: SF=0 ZF=1 AF=0 PF=1 CF=1 (and bit 1) in ah; OF=0 in al
	want[15] = (unsigned long)(0x40 | 0x04 | 0x01 | 0x02) << 8;
	for (int i = 0; i < 16; i++) {
		if (got[i] != want[i]) {
			printf("%s: %s %#lx, want %#lx\n", what, names[i], got[i], want[i]);
			exit(1);
		}
	}
	if (stackbad) {
		printf("%s: the stack below the caller changed at %#lx\n", what, stackbad);
		exit(1);
	}
}

int main(void) {
	void *h = dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *cg = dlsym(h, "__vdso_clock_gettime"), *gt = dlsym(h, "__vdso_gettimeofday");
	static struct timespec ts;
	static struct timeval tv;
	for (int i = 0; i < 100; i++) {
		check("clock_gettime(MONOTONIC)", cg, CLOCK_MONOTONIC, (unsigned long)&ts);
		check("clock_gettime(REALTIME)", cg, CLOCK_REALTIME, (unsigned long)&ts);
		check("clock_gettime(PROCESS_CPUTIME_ID)", cg, CLOCK_PROCESS_CPUTIME_ID, (unsigned long)&ts);
		check("gettimeofday", gt, (unsigned long)&tv, 0);
	}
	printf("ok\n");
	return 0;
}
