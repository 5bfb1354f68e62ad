/* A SIGSEGV handler shaped like a JVM's crash report: it runs with every
 * other signal blocked (its sa_mask), unblocks SIGSEGV itself, and stays
 * in the handler until a byte arrives on stdin; then it returns and the
 * process goes on. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static void on_segv(int sig)
{
	sigset_t s;
	char c;
	(void)sig;
	sigemptyset(&s);
	sigaddset(&s, SIGSEGV);
	sigprocmask(SIG_UNBLOCK, &s, NULL);
	write(1, "in\n", 3);
	read(0, &c, 1);
}

int main(void)
{
	struct sigaction sa = {0};
	sa.sa_handler = on_segv;
	sigfillset(&sa.sa_mask);
	sigdelset(&sa.sa_mask, SIGSEGV);
	sigaction(SIGSEGV, &sa, NULL);
	write(1, "ready\n", 6);
	for (;;) {
		usleep(10000);
	}
}
