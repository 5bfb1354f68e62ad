// onethread.so: an LD_PRELOAD library whose pthread_create starts nothing
// and reports success, so that redis-server 7 (which always starts three
// background-job threads: closing files, fsync, lazy free) stays a
// single-threaded process that tprec can record. With --save "" and
// --appendonly no, and set/get traffic only, redis queues no job for those
// threads; --jemalloc-bg-thread no avoids jemalloc's own thread, and
// --crash-log-enabled no keeps redis's crash handler (which would cancel the
// missing threads) out of the way. Benchmark use only.
#define _GNU_SOURCE
#include <pthread.h>

static unsigned long next_id = 1;

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	(void)attr;
	(void)fn;
	(void)arg;
	*t = (pthread_t)next_id++;
	return 0;
}
