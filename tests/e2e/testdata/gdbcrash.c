/* gdbcrash: deterministic work spread over a few seconds, then a NULL
 * dereference. The values it computes depend only on the round count, so a
 * native run under gdb and a replay of a recording show the same ones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct record {
	uint64_t sum;
	int rounds;
	struct record *next;
};

static uint64_t table[64];

__attribute__((noinline)) static uint64_t step_once(struct record *r, int round)
{
	uint64_t h = r->sum ^ (uint64_t)round;
	for (int i = 0; i < 64; i++) {
		h = (h ^ table[i]) * 1099511628211ULL;
		table[i] += h >> 7;
	}
	r->sum = h;
	r->rounds = round;
	return h;
}

__attribute__((noinline)) static void crash_here(struct record *r)
{
	uint64_t total = r->sum + (uint64_t)r->rounds;
	r->next->sum += total; /* r->next is NULL */
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 1500;
	struct record *head = calloc(1, sizeof *head);
	for (int i = 0; i < 64; i++)
		table[i] = (uint64_t)i * 0x9e3779b97f4a7c15ULL;
	for (int round = 1; round <= rounds; round++) {
		step_once(head, round);
		if (round % 500 == 0) {
			printf("round %d sum %016llx\n", round, (unsigned long long)head->sum);
			fflush(stdout);
		}
		usleep(2000);
	}
	crash_here(head);
	return 0;
}
