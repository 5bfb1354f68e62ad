/* segvinfo: faults after a while; a SIGSEGV handler prints what the kernel
 * reported, then the program dies of the signal. Recorded or not, the output
 * and the way it dies must be the same. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void handler(int sig, siginfo_t *si, void *ctx)
{
	(void)ctx;
	char buf[128];
	int n = snprintf(buf, sizeof buf, "signal %d code %d addr %p\n", sig, si->si_code, si->si_addr);
	write(1, buf, n);
	/* SA_RESETHAND: returning re-executes the access, which now kills. */
}

int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = handler;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
	sigaction(SIGSEGV, &sa, NULL);
	struct timespec ts = {0, 2000000};
	for (int i = 0; i < 300; i++)
		nanosleep(&ts, NULL);
	volatile int *p = (int *)0x1234;
	return *p;
}
