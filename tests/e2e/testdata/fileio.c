/* fileio: creates, writes, reads back and unlinks files in a directory, over
 * and over, prints a line per round, then crashes. A replay of it must not
 * create, write or delete anything on the replay machine. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	const char *dir = argv[1];
	double seconds = atof(argv[2]);
	double start = now();
	char path[4096], buf[256];
	long total = 0;
	for (int round = 0; now() - start < seconds; round++) {
		snprintf(path, sizeof path, "%s/round-%d.txt", dir, round);
		int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
		if (fd < 0) {
			perror("open");
			return 1;
		}
		int n = snprintf(buf, sizeof buf, "round %d at %.6f\n", round, now() - start);
		if (write(fd, buf, n) != n)
			return 1;
		close(fd);
		fd = open(path, O_RDONLY);
		total += read(fd, buf, sizeof buf);
		close(fd);
		unlink(path);
		printf("round %d total %ld\n", round, total);
		fflush(stdout);
		usleep(5000);
	}
	volatile int *p = NULL;
	return *p;
}
