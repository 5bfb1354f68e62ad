/* segvinfo: faults after a while; a SIGSEGV handler prints what the kernel
 * reported, then the program dies of the signal. Recorded or not, the output
 * and the way it dies must be the same. Built with -DDONTFORK it first marks
 * a buffer MADV_DONTFORK, which makes the recorder inject calls into the
 * crashing thread before its dump's shadow, and runs 3 s instead of 0.6. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
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
	int naps = 300;
#ifdef DONTFORK
	char *b = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b == MAP_FAILED || madvise(b, 1 << 16, MADV_DONTFORK) != 0)
		return 2;
	b[0] = 1;
	naps = 1500;
#endif
	struct timespec ts = {0, 2000000};
	for (int i = 0; i < naps; i++)
		nanosleep(&ts, NULL);
	volatile int *p = (int *)0x1234;
	return *p;
}
