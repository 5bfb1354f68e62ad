// Copies 32 MB back and forth with one `rep movsb`, calling getppid between
// copies: a signal from outside almost always lands inside the copy, between
// two of its iterations.
//
// repcopy FILE prints "ready", waits for SIGUSR1, then maps FILE (8 MiB)
// and copies it with one `rep movsb`, mapped afresh for each copy, while a
// second thread, woken through a pipe right before the first copy, sends
// the main thread SIGSEGV 1 ms later. The copies read pages of mappings
// made in the window: a replay serves each on its first touch, the last
// ones while it single-steps the iterations before the end.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void copy(char *d, const char *s, size_t c) {
	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(c) : : "memory");
}

static int wake[2];
static pid_t main_tid;
static volatile sig_atomic_t go;

static void on_usr1(int sig) { (void)sig; go = 1; }

static void *killer(void *arg) {
	char c;
	(void)arg;
	if (read(wake[0], &c, 1) != 1)
		return NULL;
	struct timespec ms = {0, 1000000};
	nanosleep(&ms, NULL);
	syscall(SYS_tgkill, getpid(), main_tid, SIGSEGV);
	return NULL;
}

static int mapped(const char *path) {
	size_t n = 8 << 20;
	int fd = open(path, O_RDONLY);
	char *b = malloc(n);
	pthread_t t;
	// SIGUSR1 is the main thread's: the second thread, blocked in its read
	// from creation, never takes it.
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);
	if (fd < 0 || !b || pipe(wake) || pthread_create(&t, NULL, killer, NULL))
		return 1;
	pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
	memset(b, 2, n);
	main_tid = gettid();
	signal(SIGUSR1, on_usr1);
	if (write(1, "ready\n", 6) != 6)
		return 1;
	while (!go) {
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
	if (write(wake[1], "x", 1) != 1)
		return 1;
	for (;;) {
		char *s = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
		if (s == MAP_FAILED)
			return 1;
		copy(b, s, n);
		munmap(s, n);
	}
}

int main(int argc, char **argv) {
	if (argc > 1)
		return mapped(argv[1]);
	size_t n = 32 << 20;
	char *a = malloc(n), *b = malloc(n);
	memset(a, 1, n);
	memset(b, 2, n);
	for (unsigned i = 0;; i++) {
		char *d = (i & 1) ? a : b, *s = (i & 1) ? b : a;
		copy(d, s, n - (i % 4096));
		getppid();
	}
}
