// Fixture: after its last syscall it spins forever in a loop whose registers
// repeat every 256 iterations while memory does not; the harness ends the
// recording at an arbitrary instruction, as a dump request or a kill would.
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned char ring[256];
static volatile unsigned long iterations;

int main(void) {
	syscall(SYS_getppid, 0);
	syscall(SYS_getuid);
	for (unsigned char i = 0;; i++) {
		ring[i]++;
		iterations++;
	}
}
