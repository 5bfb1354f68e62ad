// Stores the time stamp counter in memory three times, 100 ms apart, then
// copies it to another variable over and over until a signal from outside
// ends it. rdtsc gives data without a syscall, so a replay stores another
// value. The loop carries the value in a register for one instruction
// only, so a replay stands at most points of the loop with every register
// as recorded, and with the copy, in a page the loop keeps writing,
// different.
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

unsigned long stamp, copy;

int main(void) {
	struct timespec pause = {0, 100 * 1000 * 1000};
	for (int i = 0; i < 3; i++) {
		stamp = __rdtsc();
		nanosleep(&pause, NULL);
	}
	write(1, "copying\n", 8);
	__asm__ volatile(
		"1:\n\t"
		"mov stamp(%%rip), %%rax\n\t"
		"mov %%rax, copy(%%rip)\n\t"
		"xor %%eax, %%eax\n\t"
		"pause\n\t"
		"pause\n\t"
		"pause\n\t"
		"pause\n\t"
		"jmp 1b\n\t" ::: "rax", "memory", "cc");
	return 0;
}
