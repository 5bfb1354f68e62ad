// A program that spends its time between syscalls calling a tiny function,
// for measuring the end-point search of a replay (by hand, as root):
//
//   gcc -O1 -o /tmp/hotloop scripts/bench/hotloop.c
//   /tmp/hotloop & P=$!; bin/tprec --pid $P -q -o /tmp & sleep 1.3; kill -SEGV $P
//   bin/tpreplay -v /tmp/tp-$P-*.tpc   # "end found at breakpoint hit N ..."
//
// Crashed from outside, the recorded end is somewhere in that loop, and a
// replay finds it by stopping at every pass over the recorded rip since the
// last syscall (tens of thousands of passes) and comparing the registers.
#include <unistd.h>

volatile unsigned long x;

__attribute__((noinline)) void f(void) { x = x * 6364136223846793005UL + 1; }

int main(void) {
	for (;;) {
		getppid();
		for (int j = 0; j < 100000; j++)
			f();
	}
}
