/* Cost of a caught signal: the program sends itself SIGUSR1 N times (kill,
 * then the handler runs and returns) and prints the time per signal in
 * microseconds. Run it unrecorded and under tprec; the difference is what
 * recording one delivery costs (BENCHMARKS.md, "Signals").
 * Usage: sigcost [N] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long caught;
static void on_usr1(int sig) { (void)sig; caught++; }

#include "now.h"

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	pid_t me = getpid();
	double t0 = now();
	for (long i = 0; i < n; i++)
		kill(me, SIGUSR1);
	double t = now() - t0;
	printf("%ld signals, %.2f us each\n", (long)caught, t / n * 1e6);
	return 0;
}
