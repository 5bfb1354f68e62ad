// A server's shape: the main thread waits in epoll_wait, with a timeout, for
// events that never come (a listening socket nobody connects to); a worker
// thread does the work (hashes a buffer and writes a line to a pipe every
// few milliseconds). Each time the main thread's wait times out it prints
// how long it waited, in milliseconds, so that a test can see that the
// waits still last their timeout while tprec interrupts them at every
// boundary.
//
// usage: epollidle TIMEOUT_MS SECONDS
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

static int pipefd[2];
static volatile uint64_t total;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *worker(void *arg)
{
	(void)arg;
	unsigned char buf[4096];
	memset(buf, 7, sizeof buf);
	for (uint64_t round = 0;; round++) {
		uint64_t h = round;
		for (int k = 0; k < 4; k++)
			for (size_t i = 0; i < sizeof buf; i++)
				h = h * 31 + buf[i];
		buf[round % sizeof buf] = (unsigned char)h;
		total += h;
		char line[64];
		int n = snprintf(line, sizeof line, "%llu %llx\n", (unsigned long long)round, (unsigned long long)h);
		if (write(pipefd[1], line, n) < 0)
			return NULL;
		char drain[256];
		if (read(pipefd[0], drain, sizeof drain) < 0)
			return NULL;
	}
}

int main(int argc, char **argv)
{
	int timeout = argc > 1 ? atoi(argv[1]) : 2000;
	double secs = argc > 2 ? atof(argv[2]) : 5;
	if (pipe(pipefd) < 0)
		return 1;
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 8) < 0)
		return 1;
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev) < 0)
		return 1;
	pthread_t t;
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	double start = now_ms(), last = start;
	while (now_ms() - start < secs * 1e3) {
		struct epoll_event got[4];
		int n = epoll_wait(ep, got, 4, timeout);
		double t1 = now_ms();
		if (n == 0) {
			printf("timeout %.0f\n", t1 - last);
			last = t1;
		} else if (n < 0) {
			printf("eintr\n");
		}
	}
	return 0;
}
