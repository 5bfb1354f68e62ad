// condagain: a thread woken through a futex (a condition variable's) finds
// the mutex its waker holds, and calls FUTEX_WAIT for it only after the
// waker released it: the wait returns EAGAIN, and the futex wake of the
// waker's release comes later still. Replay holds a waker whose next call
// is such a wake until the woken thread has run (a condition variable
// signalled under its mutex); here the waker must run on to its release
// first, or the woken thread finds the mutex held again. Raw futexes, so
// that the timing does not depend on glibc's mutex: the threads spin
// without calls between the steps. Then the main thread sleeps 0.3 s in
// 1 ms steps and writes through a null pointer.
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int cv, mtx;

// futex makes the call as glibc's own locks do, without touching errno
// (syscall(3) would store EAGAIN there).
static long futex(atomic_int *a, int op, int v)
{
	long ret;
	register long timeout __asm__("r10") = 0;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"((long)SYS_futex), "D"(a), "S"((long)(op | FUTEX_PRIVATE_FLAG)), "d"((long)v), "r"(timeout)
			 : "rcx", "r11", "memory");
	return ret;
}

// spin runs n iterations without a call or a store.
static void spin(long n)
{
	for (long i = 0; i < n; i++)
		__asm__ volatile("" ::: "memory");
}

static void *waiter(void *arg)
{
	(void)arg;
	while (atomic_load(&cv) == 0)
		futex(&cv, FUTEX_WAIT, 0);
	if (atomic_exchange(&mtx, 2) != 0) {
		spin(400000000L); // the waker releases the mutex meanwhile
		do
			futex(&mtx, FUTEX_WAIT, 2); // EAGAIN
		while (atomic_exchange(&mtx, 2) != 0);
	}
	syscall(SYS_getppid);
	if (atomic_exchange(&mtx, 0) == 2)
		futex(&mtx, FUTEX_WAKE, 1);
	for (;;)
		pause();
}

int main(void)
{
	pthread_t t;
	struct timespec ms = {0, 1000000};
	if (pthread_create(&t, NULL, waiter, NULL))
		return 1;
	for (int i = 0; i < 300; i++)
		nanosleep(&ms, NULL);
	atomic_store(&mtx, 2); // held, a waiter to come
	atomic_store(&cv, 1);
	futex(&cv, FUTEX_WAKE, 1); // wakes the waiter: returns 1
	spin(100000000L);
	atomic_store(&mtx, 0); // the release
	spin(800000000L);        // until after the waiter's EAGAIN
	futex(&mtx, FUTEX_WAKE, 1); // the release's wake
	for (int i = 0; i < 300; i++)
		nanosleep(&ms, NULL);
	*(volatile int *)0 = 0;
	return 0;
}
