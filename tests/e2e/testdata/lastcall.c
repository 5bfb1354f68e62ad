// The window's last syscall is followed by code on a page nothing ran
// before: a read of /dev/zero, then a spin on a page of its own until a
// POSIX timer raises SIGSEGV, a crash that comes from outside the code. A
// replay that starts with every page inaccessible (the dump's trial) must
// serve that page after the last call to find where the recording ended.
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__asm__(".text\n"
	".balign 4096\n"
	".globl spin_page\n"
	"spin_page:\n"
	"1: pause\n"
	"jmp 1b\n"
	".balign 4096\n");
void spin_page(void);

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1;
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0)
		return 1;
	char buf[16];
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (read(fd, buf, sizeof buf) != sizeof buf)
			return 1;
		struct timespec d = {0, 1000000};
		nanosleep(&d, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec + (now.tv_nsec - t0.tv_nsec) / 1e9 < secs);
	struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGSEGV};
	timer_t timer;
	if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0)
		return 1;
	struct itimerspec it = {{0, 0}, {0, 150000000}};
	if (timer_settime(timer, 0, &it, NULL) != 0)
		return 1;
	if (read(fd, buf, sizeof buf) != sizeof buf)
		return 1;
	spin_page();
	return 0;
}
