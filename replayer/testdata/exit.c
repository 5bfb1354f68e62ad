// Fixture: a few syscalls in the window, then exit(3) through atexit/stdio.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
	syscall(SYS_getppid, 0);
	long pid = syscall(SYS_getpid);
	printf("pid parity %ld\n", pid & 1);
	exit(3);
}
