// A computation that makes a syscall only every 16M iterations, under an
// interval timer whose SIGALRM handler counts: most deliveries land in the
// loop, millions of passes over the same instructions after the last
// syscall. Usage: busyloop PERIOD_MS
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <unistd.h>

static volatile unsigned long ticks;
static void on_alarm(int sig) { (void)sig; ticks++; }

int main(int argc, char **argv) {
	long ms = argc > 1 ? atol(argv[1]) : 20;
	signal(SIGALRM, on_alarm);
	struct itimerval it = {{ms / 1000, (ms % 1000) * 1000}, {ms / 1000, (ms % 1000) * 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
	volatile unsigned long x = 0;
	for (unsigned long i = 0;; i++) {
		x = x * 6364136223846793005UL + i;
		if ((i & 0xffffff) == 0)
			getppid();
	}
}
