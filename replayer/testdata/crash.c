// Fixture: reads a file, takes a branch on its content, allocates, writes and
// unlinks files in the directory argv[1], prints, then dereferences NULL.
// syscall(SYS_getppid, page) marks the start of the recorded window and tells
// the harness where `page` is.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char page[4096] __attribute__((aligned(4096)));

__attribute__((noinline)) void crash_here(volatile int *p) { *p = 42; }

int main(int argc, char **argv) {
	char path[512], buf[64] = {0};
	struct timespec ts;
	struct stat st;
	memset(page, 'p', sizeof page);
	syscall(SYS_getppid, page);

	syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
	snprintf(path, sizeof path, "%s/input", argv[1]);
	int fd = open(path, O_RDONLY);
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	fstat(1, &st);
	if (buf[0] == 'A')
		syscall(SYS_getpid);
	else
		syscall(SYS_getuid);
	char *big = malloc(300000); // above the mmap threshold
	char *small = malloc(100);  // first use of the heap: brk
	memset(big, 'b', 300000);
	strcpy(small, "small");
	snprintf(path, sizeof path, "%s/new", argv[1]);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	write(fd, "payload\n", 8);
	close(fd);
	snprintf(path, sizeof path, "%s/keep", argv[1]);
	unlink(path);
	free(big);
	printf("read %zd bytes: %s page %c %s size %lld time %ld\n", n, buf, page[100], small,
	       (long long)st.st_size, (long)ts.tv_sec);
	fflush(stdout);
	crash_here(NULL);
	return 0;
}
