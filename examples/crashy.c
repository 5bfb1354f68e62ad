/* crashy: a small program that works for a while and then crashes by itself.
 *
 * It keeps a table of running checksums over data it reads from a file it
 * writes first, asks the clock often, and after a few seconds follows a stale
 * pointer out of a freed record: the kind of bug a recorded replay is for. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct record {
	uint64_t sum;
	int rounds;
	struct record *next;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ULL;
	return h;
}

/* retire frees every record but the newest and clears its link. */
static void retire(struct record *head)
{
	struct record *q = head->next;
	head->next = NULL;
	while (q) {
		struct record *n = q->next;
		free(q);
		q = n;
	}
}

__attribute__((noinline)) static void crash_here(struct record *r)
{
	/* r->next was cleared when the record was retired: this reads through NULL. */
	r->next->sum += r->sum;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	char path[] = "/tmp/crashy-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0) {
		perror("mkstemp");
		return 1;
	}
	unsigned char block[4096];
	for (size_t i = 0; i < sizeof block; i++)
		block[i] = (unsigned char)(i * 7 + 3);
	for (int i = 0; i < 64; i++)
		if (write(fd, block, sizeof block) != sizeof block) {
			perror("write");
			return 1;
		}

	struct record *head = NULL;
	double start = now();
	int round = 0;
	while (now() - start < seconds) {
		struct record *r = calloc(1, sizeof *r);
		r->rounds = ++round;
		r->next = head;
		head = r;
		if (pread(fd, block, sizeof block, (off_t)(round % 64) * 4096) != sizeof block) {
			perror("pread");
			return 1;
		}
		for (struct record *q = head; q; q = q->next)
			q->sum = mix(q->sum, block, 256);
		if (round % 50 == 0) {
			retire(head);
			printf("round %d sum %016llx\n", round, (unsigned long long)head->sum);
			fflush(stdout);
		}
		usleep(2000);
	}
	close(fd);
	unlink(path);
	retire(head);
	crash_here(head);
	return 0;
}
