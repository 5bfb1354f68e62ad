// Fixture: maps a file during the recorded window, changes its protection,
// installs a signal disposition, and touches the mapping only when argv[2] is
// "touch"; then dereferences NULL.
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile char sink;

int main(int argc, char **argv) {
	char path[512];
	syscall(SYS_getppid, 0);
	signal(SIGUSR2, SIG_IGN);
	snprintf(path, sizeof path, "%s/input", argv[1]);
	int fd = open(path, O_RDONLY);
	char *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return 1;
	mprotect(p, 4096, PROT_READ | PROT_WRITE);
	if (argc > 2 && strcmp(argv[2], "touch") == 0)
		sink = p[0];
	*(volatile int *)0 = 1;
	return 0;
}
