// Reads the clock in a loop under a 2 ms timer whose SIGALRM handler
// computes for about 1 ms, and prints a count every million reads.
//
// Recorded with --backend ptrace and tprec killed with SIGKILL at a random
// moment, the process used to die of SIGBUS in 2 to 5 kills of 10: its
// handler, entered in a vDSO stub, returned into the original
// clock_gettime the guardian had put back under it
// (TestSlowHandlerUnharmedWhenTprecKilled).
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static volatile unsigned long spins;

static void on_alarm(int sig) {
	(void)sig;
	for (volatile int i = 0; i < 300000; i++)
		spins++;
}

int main(void) {
	signal(SIGALRM, on_alarm);
	struct itimerval it = {{0, 2000}, {0, 2000}};
	setitimer(ITIMER_REAL, &it, NULL);
	struct timespec ts;
	for (unsigned long n = 0;; n++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (n % 1000000 == 0) {
			printf("%lu\n", n);
			fflush(stdout);
		}
	}
}
