// A computation that makes syscalls only every 16M iterations (getppid and
// a clock read), under an interval timer whose SIGALRM handler counts: a
// delivery lands in the loop, millions of passes over the same
// instructions after the last syscall. After SECS seconds the program
// crashes on a null pointer.
// Usage: busyloop PERIOD_MS SECS
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long ticks;
static void on_alarm(int sig) { (void)sig; ticks++; }

int main(int argc, char **argv) {
	long ms = argc > 1 ? atol(argv[1]) : 20;
	double secs = argc > 2 ? atof(argv[2]) : 10;
	signal(SIGALRM, on_alarm);
	struct itimerval it = {{ms / 1000, (ms % 1000) * 1000}, {ms / 1000, (ms % 1000) * 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	volatile unsigned long x = 0;
	for (unsigned long i = 0;; i++) {
		x = x * 6364136223846793005UL + i;
		if ((i & 0xffffff) == 0) {
			getppid();
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - t0.tv_sec + (now.tv_nsec - t0.tv_nsec) / 1e9 > secs)
				*(volatile int *)(ticks & 0) = 1;
		}
	}
}
