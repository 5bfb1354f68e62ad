/* The floor of a ptrace stop on this machine: a tracee makes N getppid
 * calls and the tracer answers each at a PTRACE_SYSEMU stop, as a replay
 * answers an emulated call. MODE 0 only resumes, 1 also reads the
 * registers, 2 also sets rax (PTRACE_POKEUSER), which is what a replay does
 * at least. CPU pins both to one CPU (-1: the scheduler places them). Not
 * part of make bench:
 *   gcc -O2 -o /tmp/pingpong scripts/bench/pingpong.c
 *   /tmp/pingpong 200000 2 -1; /tmp/pingpong 200000 2 1
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PTRACE_SYSEMU
#define PTRACE_SYSEMU 31
#endif

#include "now.h"

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200000;
	int mode = argc > 2 ? atoi(argv[2]) : 2;
	int cpu = argc > 3 ? atoi(argv[3]) : -1;
	if (cpu >= 0) {
		cpu_set_t s;
		CPU_ZERO(&s);
		CPU_SET(cpu, &s);
		sched_setaffinity(0, sizeof s, &s); /* the tracee inherits it */
	}
	pid_t p = fork();
	if (p == 0) {
		ptrace(PTRACE_TRACEME, 0, 0, 0);
		raise(SIGSTOP);
		for (;;)
			syscall(SYS_getppid);
	}
	int st;
	waitpid(p, &st, 0);
	double t0 = now();
	int k = 0;
	for (int j = 0; j < n; j++) {
		if (ptrace(PTRACE_SYSEMU, p, 0, 0) < 0 || waitpid(p, &st, 0) < 0 || WIFEXITED(st))
			break;
		if (mode >= 1) {
			struct user_regs_struct r;
			ptrace(PTRACE_GETREGS, p, 0, &r);
			if (mode >= 2)
				ptrace(PTRACE_POKEUSER, p, offsetof(struct user_regs_struct, rax), (void *)42);
		}
		k++;
	}
	double t = now() - t0;
	kill(p, SIGKILL);
	waitpid(p, &st, 0);
	printf("mode %d, cpu %d: %d stops, %.2f us each\n", mode, cpu, k, t / k * 1e6);
	return 0;
}
