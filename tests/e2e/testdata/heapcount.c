// Grows its heap with brk, says so on the FIFO named by its argument, then
// counts in the new heap page forever: the registers are the same at every
// pass of the loop, and only that word tells one pass from another. A
// crash sent from outside right after the message lands in the interval
// that grew the heap, whose recorded map (taken at its start) does not
// hold the page.
#include <fcntl.h>
#include <unistd.h>

int main(int argc, char **argv) {
	int fd = open(argv[1], O_WRONLY);
	usleep(300 * 1000);
	unsigned long *count = sbrk(4 * 4096);
	*count = 0;
	write(fd, "grown\n", 6);
	// The counter stays in memory: addq to it, never loaded.
	__asm__ volatile("1: addq $1, (%0)\n\tjmp 1b" ::"r"(count) : "memory", "cc");
}
