// A SIGALRM handler that computes for about 3 ms, every 10 ms, while the
// program sleeps and calls getppid in a loop: interval boundaries (and the
// pieces of a trial replay) often begin inside the handler, before its
// rt_sigreturn. After 300 alarms (3 s) it crashes by itself, in its main
// loop: a crash sent from outside could land in the handler's loop, whose
// end point a replay finds only by comparing each of up to 3 million passes.
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long n, spin;
static void on_alarm(int sig)
{
	(void)sig;
	n++;
	for (int i = 0; i < 3000000; i++)
		spin += i;
}

int main(void)
{
	struct sigaction sa = {0};
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {{0, 10000}, {0, 10000}};
	setitimer(ITIMER_REAL, &it, NULL);
	for (;;) {
		struct timespec d = {0, 1000000};
		nanosleep(&d, NULL);
		getppid();
		if (n >= 300)
			*(volatile int *)0 = 1;
	}
}
