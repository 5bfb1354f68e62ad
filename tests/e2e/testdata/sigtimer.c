// Signals delivered where syscalls return: an interval timer raises SIGALRM
// (handler with SA_RESTART, SA_SIGINFO) every few milliseconds while the
// program mostly waits in read() on an empty pipe, poll() and nanosleep();
// every 50 iterations it sends itself SIGUSR1 (handler without SA_RESTART).
// The handlers count and write into the pipe; the main loop writes the
// counts to /dev/null.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t alarms, usr1;
static int pipefd[2];

static void on_alarm(int sig, siginfo_t *si, void *uc) {
	(void)sig;
	(void)uc;
	alarms += si->si_code == SI_KERNEL ? 1 : 1000;
	char c = 'a';
	if (alarms % 3 == 0 && write(pipefd[1], &c, 1) != 1)
		_exit(3);
}

static void on_usr1(int sig) {
	(void)sig;
	usr1++;
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 10;
	if (pipe2(pipefd, O_NONBLOCK) != 0)
		return 1;
	int fl = fcntl(pipefd[0], F_GETFL);
	fcntl(pipefd[0], F_SETFL, fl & ~O_NONBLOCK);
	struct sigaction sa = {0};
	sa.sa_sigaction = on_alarm;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	struct sigaction su = {0};
	su.sa_handler = on_usr1;
	sigaction(SIGUSR1, &su, NULL);
	struct itimerval it = {{0, 7000}, {0, 7000}};
	setitimer(ITIMER_REAL, &it, NULL);
	int out = open("/dev/null", O_WRONLY);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	unsigned long eintr = 0;
	for (unsigned long i = 0;; i++) {
		char buf[16];
		if (read(pipefd[0], buf, sizeof buf) < 0 && errno == EINTR)
			eintr++;
		struct pollfd p = {pipefd[0], POLLIN, 0};
		if (poll(&p, 1, 2) < 0 && errno == EINTR)
			eintr++;
		struct timespec d = {0, 500000};
		if (nanosleep(&d, NULL) < 0 && errno == EINTR)
			eintr++;
		if (i % 50 == 0)
			kill(getpid(), SIGUSR1);
		char line[96];
		int n = snprintf(line, sizeof line, "%lu %d %d %lu\n", i, (int)alarms, (int)usr1, eintr);
		if (write(out, line, n) != n)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec + (now.tv_nsec - t0.tv_nsec) / 1e9 > secs)
			break;
	}
	printf("%d alarms, %d usr1, %lu interrupted calls\n", (int)alarms, (int)usr1, eintr);
	return 0;
}
