/* Starts a child every 30 ms and waits for nothing in poll(NULL, 0, -1)
 * ("poll") or a 5 s nanosleep ("sleep") until the child's SIGCHLD, caught
 * without SA_RESTART, interrupts the wait. A recorder's boundary that
 * interrupts the wait makes the kernel go on with it as restart_syscall,
 * which the SIGCHLD then interrupts. */
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile int collected;

static void on_child(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		collected++;
}

int main(int argc, char **argv) {
	int sleeping = argc > 1 && strcmp(argv[1], "sleep") == 0;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_child;
	sigaction(SIGCHLD, &sa, NULL);
	write(1, "ready\n", 6);
	for (;;) {
		if (fork() == 0) {
			usleep(30000);
			_exit(0);
		}
		if (sleeping) {
			struct timespec ts = {5, 0};
			nanosleep(&ts, NULL);
		} else {
			poll(NULL, 0, -1);
		}
	}
}
