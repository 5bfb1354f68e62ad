// Runs /bin/true with system() every 10 ms, forever. glibc's system()
// starts the shell with posix_spawn: clone3 with CLONE_VM|CLONE_VFORK, the
// child running on a stack the parent mapped, in the parent's memory, until
// it calls exec.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
	for (;;) {
		int r = system("/bin/true");
		if (r != 0)
			printf("system: %d\n", r);
		usleep(10000);
	}
}
