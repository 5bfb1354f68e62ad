// A computation that makes syscalls only every 16M iterations (getppid and
// a clock read, tens of milliseconds apart). At the first of those points
// after DELAY_MS it arms a one-shot 10 ms timer whose SIGALRM handler
// counts: the delivery lands in the loop, millions of passes over the same
// instructions after the last syscall and long before the next one. After
// SECS seconds the program crashes on a null pointer.
// Usage: busyloop DELAY_MS SECS
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long ticks;
static void on_alarm(int sig) { (void)sig; ticks++; }

int main(int argc, char **argv) {
	double delay = (argc > 1 ? atol(argv[1]) : 1000) / 1000.0;
	double secs = argc > 2 ? atof(argv[2]) : 10;
	signal(SIGALRM, on_alarm);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int armed = 0;
	volatile unsigned long x = 0;
	for (unsigned long i = 0;; i++) {
		x = x * 6364136223846793005UL + i;
		if ((i & 0xffffff) == 0) {
			getppid();
			clock_gettime(CLOCK_MONOTONIC, &now);
			double elapsed = now.tv_sec - t0.tv_sec + (now.tv_nsec - t0.tv_nsec) / 1e9;
			if (!armed && elapsed > delay) {
				// One loop of 16M iterations takes far longer than 10 ms.
				struct itimerval it = {{0, 0}, {0, 10000}};
				setitimer(ITIMER_REAL, &it, NULL);
				armed = 1;
			}
			if (elapsed > secs)
				*(volatile int *)(ticks & 0) = 1;
		}
	}
}
