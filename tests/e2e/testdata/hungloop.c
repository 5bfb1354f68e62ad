// hungloop: a server whose main thread hangs in a loop that makes no
// call, while another thread goes on with its own calls (a heartbeat every
// 20 ms), until a watchdog kills it from outside. The signal lands in the
// loop, at an arbitrary iteration of hundreds of millions; the replay
// finds it by comparing the registers at every pass over the instruction
// where the recording ended.
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t beats, seen;

static void *heartbeat(void *arg) {
	(void)arg;
	for (;;) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, 0);
		beats++;
	}
	return 0;
}

int main(void) {
	pthread_t t;
	pthread_create(&t, 0, heartbeat, 0);
	uint64_t h = 1469598103934665603ull;
	for (uint64_t i = 0;; i++) {
		h = (h ^ i) * 1099511628211ull;
		if ((i & 0xffffff) == 0)
			seen = h;
	}
}
