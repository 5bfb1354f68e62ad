// dyntls: loads the shared object named by its argument with dlopen and
// calls its count() every millisecond until killed. The object's
// thread-local counter is then in a block glibc allocates on the first
// access, reached through the thread's DTV, not in the static area below
// the thread pointer where the objects loaded at startup have theirs.
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	int (*count)(void) = (int (*)(void))dlsym(h, "count");
	if (!count)
		return 1;
	struct timespec ms = {0, 1000000};
	for (;;) {
		count();
		nanosleep(&ms, NULL);
	}
}
