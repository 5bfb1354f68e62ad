// A lock contended in the recording and not in a replay. The holder's read
// returns, it takes the lock and spins 0.2 s (no call) before releasing it;
// meanwhile the other thread's 1 ms sleep returns and it asks for the lock,
// so it waits in futex and the holder's release wakes it with another
// futex call. A replay runs each thread on to its next call as soon as its
// call returns: the holder takes and releases the lock with no one waiting
// and makes neither futex call. After 0.6 s of 1 ms sleeps more, the main
// thread faults.
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static int p1[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile long counter;

static void *holder(void *arg) {
	(void)arg;
	char c;
	if (read(p1[0], &c, 1) != 1)
		return NULL;
	pthread_mutex_lock(&lock);
	for (volatile long i = 0; i < 100000000L; i++)
		;
	counter++;
	pthread_mutex_unlock(&lock);
	for (;;)
		pause();
}

int main(void) {
	pthread_t t;
	if (pipe(p1) || pthread_create(&t, NULL, holder, NULL))
		return 1;
	struct timespec ms = {0, 1000000};
	for (int i = 0; i < 300; i++)
		nanosleep(&ms, NULL);
	char c = 'x';
	if (write(p1[1], &c, 1) != 1)
		return 1;
	nanosleep(&ms, NULL);
	pthread_mutex_lock(&lock);
	counter++;
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < 600; i++)
		nanosleep(&ms, NULL);
	counter++;
	*(volatile int *)0 = 0;
	return 0;
}
