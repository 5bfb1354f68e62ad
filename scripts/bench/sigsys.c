/* What a syscall costs when a seccomp filter traps it (SECCOMP_RET_TRAP) and
 * a SIGSYS handler in the process answers it, against the plain syscall:
 * the per-call price of emulating a replayed call inside the replayed
 * process instead of at a ptrace stop. Not part of make bench:
 *   gcc -O2 -o /tmp/sigsys scripts/bench/sigsys.c && /tmp/sigsys
 */
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static void answer(int sig, siginfo_t *si, void *ctx)
{
	(void)sig;
	(void)si;
	((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RAX] = 42;
}

#include "now.h"

int main(void)
{
	const int n = 1000000;
	double t = now();
	for (int i = 0; i < n; i++)
		syscall(SYS_getppid);
	double plain = (now() - t) / n;

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = answer;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSYS, &sa, NULL);
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0), /* seccomp_data.nr */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof f / sizeof f[0], f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)) {
		perror("seccomp");
		return 1;
	}
	long sum = 0;
	t = now();
	for (int i = 0; i < n; i++)
		sum += syscall(SYS_getppid);
	double trapped = (now() - t) / n;
	printf("plain getppid %.0f ns, trapped and answered by a SIGSYS handler %.0f ns (answer %ld)\n",
	       plain * 1e9, trapped * 1e9, sum / n);
	return 0;
}
