// Two threads: a worker reads from a pipe the main thread writes a byte
// into every millisecond. After a second the main thread makes its last
// calls (two timers) and spins. The first timer's SIGALRM interrupts the
// spin; its handler spins too, never to return. The second timer sends
// SIGSEGV to the worker, blocked in its read: the process ends with the main
// thread running in the handler, its last call and a signal delivered in
// user code behind it.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int pipefd[2];
static volatile pid_t worker_tid;
static void on_alarm(int sig) {
	(void)sig;
	for (;;)
		__asm__ volatile("pause");
}

static void *worker(void *arg) {
	(void)arg;
	worker_tid = syscall(SYS_gettid);
	char c;
	while (read(pipefd[0], &c, 1) == 1)
		;
	return NULL;
}

static void timer_to(pid_t tid, int sig, long ms) {
	struct sigevent ev = {.sigev_notify = SIGEV_THREAD_ID, .sigev_signo = sig};
	ev._sigev_un._tid = tid;
	timer_t t;
	if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0)
		exit(1);
	struct itimerspec it = {{0, 0}, {0, ms * 1000000}};
	if (timer_settime(t, 0, &it, NULL) != 0)
		exit(1);
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 1;
	if (pipe(pipefd) != 0)
		return 1;
	struct sigaction sa = {.sa_handler = on_alarm};
	sigaction(SIGALRM, &sa, NULL);
	pthread_t th;
	pthread_create(&th, NULL, worker, NULL);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (write(pipefd[1], "x", 1) != 1)
			return 1;
		struct timespec d = {0, 1000000};
		nanosleep(&d, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec + (now.tv_nsec - t0.tv_nsec) / 1e9 < secs || !worker_tid);
	timer_to(syscall(SYS_gettid), SIGALRM, 30);
	timer_to(worker_tid, SIGSEGV, 80);
	for (;;)
		__asm__ volatile("pause");
}
