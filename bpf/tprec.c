//go:build ignore

/* eBPF side of tprec's recorder: the syscall log and the touched-page stream
 * of the recorded processes.
 *
 * raw_syscalls:sys_enter keeps each thread's arguments; raw_syscalls:sys_exit
 * sends one record per completed call (sequence number, number, arguments,
 * return value, ip) followed by the memory the call wrote, copied with
 * bpf_probe_read_user as the syscall table (syscall_table.h, generated from
 * the Go table) describes it. A call's record is split into parts of at most
 * TP_CHUNK bytes; the last part carries TP_F_END. exceptions:page_fault_user
 * and page_fault_kernel send the first fault of each page per interval.
 * Nothing is dropped silently: a ring buffer without room bumps a per-CPU
 * counter the recorder reads at every interval boundary. */

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "tprec.h"
#include "syscall_table.h"

char LICENSE[] SEC("license") = "GPL";

#define TP_CHUNK 32768 /* most bytes of one ring buffer record */
#define TP_ITEM 16     /* sizeof(struct tp_item) */
#define TP_BUF (2 * TP_CHUNK + 64)
#define TP_PAGE 4096ULL
#define TP_USER_END 0x00007ffffffff000ULL /* arch/x86/include/asm/page_64.h: TASK_SIZE_MAX */
#define TP_NR_RESTART 219                 /* restart_syscall */
#define TP_MAX_IOV 1024                   /* include/uapi/linux/uio.h: UIO_MAXIOV */
#define TP_MAX_STEPS 4096                 /* copy steps per range: >= max_capture / page */
#define TP_SOCKADDR 128                   /* sizeof(struct sockaddr_storage) */
#define TP_MSGHDR 56                      /* sizeof(struct user_msghdr) on x86-64 */
#define TP_PF_WRITE 2                     /* arch/x86/include/asm/trap_pf.h: X86_PF_WRITE */
#define TP_SMALL 64                       /* capacities of records reserved in place */
#define TP_MEDIUM 512

/* Most bytes of output copied for one syscall; set by the loader. */
const volatile __u32 max_capture = 1 << 20;

/* Half the ring buffer's size in bytes, set by the loader: more data than
 * this waiting in it means the reader is falling behind. */
const volatile __u64 ring_half = 0;

/* The recorded processes, by tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct tp_proc);
} traced SEC(".maps");

struct tp_entry {
	__s64 nr;
	__u64 args[6];
};

/* Bit tgid % 64 of word tgid / 64 is set for every traced process. The
 * programs run for every task of the machine; for almost all of them this
 * test, an array lookup the verifier inlines, is the only work. Pids stay
 * below PID_MAX_LIMIT (include/linux/threads.h: 4M on 64-bit). */
#define TP_PID_LIMIT (4U << 20)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TP_PID_LIMIT / 64);
	__type(key, __u32);
	__type(value, __u64);
} traced_bits SEC(".maps");

/* The last call of each thread that returned -ERESTART_RESTARTBLOCK: what
 * restart_syscall finishes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct tp_entry);
} restarts SEC(".maps");

struct tp_page_key {
	__u32 tgid;
	__u32 pad;
	__u64 page;
};

/* epoch*2 + write of the last fault sent for a page. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 17);
	__type(key, struct tp_page_key);
	__type(value, __u64);
} pages SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 20); /* the loader sets --ringbuf-size */
} events SEC(".maps");

/* A record being built, one per CPU (the loader sets max_entries to the
 * number of possible CPUs; programs run with migration disabled). */
struct tp_scratch {
	__u32 off;    /* bytes used in buf */
	__u32 budget; /* bytes this call may still copy */
	__u32 tid;
	__u32 tgid;
	__u64 seq;
	__u16 part;
	__u16 pad[3];
	/* Loop state lives here rather than on the stack: a value loaded from
	 * a map is not tracked back through the loop's iterations, so the
	 * verifier sees each callback converge instead of unrolling it. */
	__u64 cap_addr, cap_left;            /* capture */
	__u64 iov_addr, iov_count, iov_left; /* iovecs */
	__u8 buf[TP_BUF];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tp_scratch);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tp_counters);
} counters SEC(".maps");

/* Keep the event types in the object's BTF for bpf2go -type. */
const struct tp_syscall *unused_syscall __attribute__((unused));
const struct tp_part *unused_part __attribute__((unused));
const struct tp_item *unused_item __attribute__((unused));
const struct tp_fault *unused_fault __attribute__((unused));
const enum tp_event_type *unused_event_type __attribute__((unused));
const enum tp_item_kind *unused_item_kind __attribute__((unused));
const enum tp_rec_flags *unused_rec_flags __attribute__((unused));
const enum tp_fault_flags *unused_fault_flags __attribute__((unused));
const enum tp_proc_flags *unused_proc_flags __attribute__((unused));

static __always_inline int maybe_traced(__u32 tgid)
{
	__u32 i = tgid / 64;
	__u64 *w = bpf_map_lookup_elem(&traced_bits, &i);
	return !w || ((*w >> (tgid & 63)) & 1);
}

/* traced_proc returns the state of a traced process, or NULL. */
static __always_inline struct tp_proc *traced_proc(__u32 tgid)
{
	if (!maybe_traced(tgid))
		return NULL;
	return bpf_map_lookup_elem(&traced, &tgid);
}

static __always_inline struct tp_scratch *scratch_get(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	return bpf_map_lookup_elem(&scratch, &cpu);
}

/* ring_crowded reports whether the ring buffer is more than half full: one
 * look at its positions (the size is a constant), which the other CPU, the
 * reader's, keeps moving. */
static __always_inline int ring_crowded(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > ring_half;
}

/* The reader polls the ring buffer every few milliseconds, so records are
 * sent without a wakeup (one costs an irq_work and a task wakeup per record
 * when the reader keeps up); only a ring buffer more than half full wakes it
 * at once. */
static __always_inline __u64 wake_flags(int crowded)
{
	return crowded ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline __u64 wakeup_flags(void)
{
	return wake_flags(ring_crowded());
}

static __always_inline struct tp_counters *counters_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&counters, &zero);
}

/* flush sends the record being built and starts the header of the next
 * part. Global functions (here and below) are verified once, on their own. */
__noinline int tp_flush(int end)
{
	struct tp_scratch *s = scratch_get();
	if (!s)
		return 0;
	__u32 n = s->off;
	if (n > TP_BUF)
		n = TP_BUF;
	if (end)
		s->buf[1] |= TP_F_END;
	if (bpf_ringbuf_output(&events, s->buf, n, wakeup_flags())) {
		struct tp_counters *c = counters_get();
		if (c)
			c->lost_records++;
	}
	s->part++;
	struct tp_part *h = (void *)s->buf;
	h->type = TP_EV_PART;
	h->flags = 0;
	h->part = s->part;
	h->tid = s->tid;
	h->tgid = s->tgid;
	h->pad = 0;
	h->seq = s->seq;
	s->off = sizeof(*h);
	return 0;
}

/* put_item appends an item without data, flushing first when full. */
__noinline int tp_put_item(__u8 kind, __u64 addr, __u32 len)
{
	struct tp_scratch *s = scratch_get();
	if (!s)
		return 0;
	if (s->off + TP_ITEM > TP_CHUNK) {
		tp_flush(0);
		s = scratch_get();
		if (!s)
			return 0;
	}
	__u32 off = s->off;
	if (off > TP_CHUNK)
		return 0;
	struct tp_item *it = (void *)&s->buf[off];
	it->kind = kind;
	it->len = len;
	it->addr = addr;
	s->off = off + TP_ITEM;
	return 0;
}

/* opaque is v, of which the compiler then knows nothing, and bounded is v &
 * mask, a mask the compiler cannot drop. The verifiers of older kernels
 * learn less than clang does: no bound from comparing two registers (n =
 * min(n, left)), none carried from n - 65 <= 447 back to n. clang drops a
 * mask or a comparison it proves does nothing, and Linux 6.1's verifier then
 * rejected a read's length as possibly negative or unbounded
 * (TestRecordOnOtherKernels). A length goes through one of them right
 * before the read. */
#define opaque(v) ({ __u64 __b = (v); barrier_var(__b); __b; })
#define bounded(v, mask) (opaque(v) & (mask))

/* cap_step copies the next piece of a range: as much as fits in the current
 * record; when that read fails, up to the end of the page, so that only the
 * unreadable pages are missing. */
static long cap_step(__u64 i, void *unused)
{
	struct tp_scratch *s = scratch_get();
	if (!s || s->cap_left == 0)
		return 1;
	if (s->off + TP_ITEM + 256 > TP_CHUNK) {
		tp_flush(0);
		s = scratch_get();
		if (!s)
			return 1;
	}
	__u32 off = s->off;
	if (off > TP_CHUNK - TP_ITEM - 256)
		return 1;
	__u64 addr = s->cap_addr, n = TP_CHUNK - TP_ITEM - off;
	if (n > s->cap_left)
		n = s->cap_left;
	struct tp_item *it = (void *)&s->buf[off];
	long err = bpf_probe_read_user(&s->buf[off + TP_ITEM], bounded(n, TP_CHUNK - 1), (void *)addr);
	if (err) {
		__u64 page = TP_PAGE - (addr & (TP_PAGE - 1));
		if (n > page)
			n = page;
		err = bpf_probe_read_user(&s->buf[off + TP_ITEM], bounded(n, TP_CHUNK - 1), (void *)addr);
	}
	it->addr = addr;
	it->len = n;
	if (err) {
		it->kind = TP_ITEM_UNREADABLE;
		s->off = off + TP_ITEM;
		struct tp_counters *ct = counters_get();
		if (ct)
			ct->read_failures++;
	} else {
		it->kind = TP_ITEM_MEM;
		s->off = off + TP_ITEM + ((n + 7) & ~7ULL);
	}
	s->cap_addr = addr + n;
	s->cap_left -= n;
	return 0;
}

/* capture copies [addr, addr+size) into the record, or says why not. */
__noinline int capture(__u64 addr, __u64 size)
{
	if (addr == 0 || size == 0)
		return 0;
	struct tp_scratch *s = scratch_get();
	if (!s)
		return 0;
	if (size > s->budget) {
		tp_put_item(TP_ITEM_TOOBIG, addr, size > 0xffffffffULL ? 0xffffffff : size);
		struct tp_counters *c = counters_get();
		if (c)
			c->too_big++;
		return 0;
	}
	s->budget -= size;
	s->cap_addr = addr;
	s->cap_left = size;
	bpf_loop(TP_MAX_STEPS, cap_step, NULL, 0);
	return 0;
}

struct call_ctx {
	__s64 nr;
	__u64 args[6];
	__s64 ret;
	__u64 clock, fs; /* tp_syscall's */
};

static __always_inline __u64 arg_of(struct call_ctx *c, __u8 i)
{
	switch (i) {
	case 0: return c->args[0];
	case 1: return c->args[1];
	case 2: return c->args[2];
	case 3: return c->args[3];
	case 4: return c->args[4];
	case 5: return c->args[5];
	}
	return 0;
}

/* iov_step copies the buffer of one struct iovec, filled in order; iov_left
 * counts the bytes the call transferred and not yet attributed. */
static long iov_step(__u64 i, void *unused)
{
	struct tp_scratch *s = scratch_get();
	if (!s || i >= s->iov_count || s->iov_left == 0)
		return 1;
	struct { __u64 base, len; } v;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)(s->iov_addr + i * 16)))
		return 1; /* the array was captured whole: the recorder sees why */
	__u64 n = v.len < s->iov_left ? v.len : s->iov_left;
	s->iov_left -= n;
	capture(v.base, n);
	return 0;
}

/* iovecs copies an iovec array of count entries and the first total bytes
 * of its buffers. */
__noinline int iovecs(__u64 iov, __u64 count, __s64 total)
{
	if (total <= 0 || count == 0 || count > TP_MAX_IOV)
		return 0;
	capture(iov, count * 16);
	struct tp_scratch *s = scratch_get();
	if (!s)
		return 0;
	s->iov_addr = iov;
	s->iov_count = count;
	s->iov_left = total;
	bpf_loop(TP_MAX_IOV, iov_step, NULL, 0);
	return 0;
}

/* msghdr copies what recvmsg wrote through a struct user_msghdr. */
__noinline int msghdr(__u64 addr, __s64 total)
{
	struct {
		__u64 name;
		__u32 namelen, pad;
		__u64 iov, iovlen, control, controllen;
		__u32 flags, pad2;
	} m;
	if (bpf_probe_read_user(&m, sizeof(m), (void *)addr)) {
		capture(addr, TP_MSGHDR); /* reported unreadable */
		return 0;
	}
	capture(addr, TP_MSGHDR);
	if (m.name)
		capture(m.name, m.namelen > TP_SOCKADDR ? TP_SOCKADDR : m.namelen);
	iovecs(m.iov, m.iovlen, total);
	if (m.control)
		capture(m.control, m.controllen);
	return 0;
}

/* plain_len is the length of a TP_OUT_PLAIN output whose size the
 * registers give (every size kind but TP_SIZE_ARGPTR). */
static __always_inline __u64 plain_len(struct call_ctx *c, const struct tp_out *o)
{
	__s64 rbytes = c->ret < 0 ? 0 : c->ret;
	__u64 n = 0, v;
	switch (o->size) {
	case TP_SIZE_FIXED:
		n = o->n;
		break;
	case TP_SIZE_RET:
		n = rbytes;
		break;
	case TP_SIZE_ARG:
		n = arg_of(c, o->sarg);
		break;
	case TP_SIZE_RETTIMES:
		n = (__u64)rbytes * o->n;
		break;
	case TP_SIZE_ARGTIMES:
		v = arg_of(c, o->sarg);
		n = v > 0xffffffffULL ? ~0ULL : v * o->n;
		break;
	}
	if (o->max && n > o->max)
		n = o->max;
	return n;
}

/* out_step copies the memory behind output number i of the call. */
static long out_step(__u64 i, struct call_ctx *c)
{
	__s64 nr = c->nr;
	if (nr < 0 || nr > TP_MAX_SYSNUM || i >= TP_MAX_OUTS)
		return 1;
	const struct tp_out *o = &tp_outs[nr][i];
	if (!(o->flags & TP_OUT_VALID))
		return 1;
	int failed = c->ret < 0;
	if (failed && !(o->flags & TP_OUT_ONERROR))
		return 0;
	__u64 ptr = arg_of(c, o->arg);
	if (ptr == 0)
		return 0;
	__s64 rbytes = failed ? 0 : c->ret;
	__u64 n = 0;
	switch (o->kind) {
	case TP_OUT_PLAIN:
		if (o->size == TP_SIZE_ARGPTR) {
			__u64 lp = arg_of(c, o->sarg);
			__s32 l = 0;
			if (lp == 0)
				return 0;
			capture(lp, 4);
			if (bpf_probe_read_user(&l, 4, (void *)lp) || l < 0)
				return 0;
			n = l;
			if (o->max && n > o->max)
				n = o->max;
		} else {
			n = plain_len(c, o);
		}
		capture(ptr, n);
		break;
	case TP_OUT_IOVEC:
		iovecs(ptr, arg_of(c, o->sarg), rbytes);
		break;
	case TP_OUT_MSGHDR:
		msghdr(ptr, rbytes);
		break;
	default:
		tp_put_item(TP_ITEM_UNSUPPORTED, ptr, o->kind);
	}
	return 0;
}

static __always_inline int restarting(long ret)
{
	/* include/linux/errno.h: ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND,
	 * ERESTART_RESTARTBLOCK; the program never sees them. */
	return ret == -512 || ret == -513 || ret == -514 || ret == -516;
}

/* tp_outputs counts the outputs the call can have written that the record
 * must carry: those the table declares for it (on failure, only those marked
 * OnError) at a non-null address. It returns the count times 256 plus the
 * index of the first of them. Most calls have none and skip the copy
 * machinery. */
__noinline int tp_outputs(struct call_ctx *c)
{
	if (!c)
		return 0;
	__s64 nr = c->nr;
	int count = 0, first = 0;
	if (nr < 0 || nr > TP_MAX_SYSNUM)
		return 0;
	int failed = c->ret < 0;
	for (int i = 0; i < TP_MAX_OUTS; i++) {
		const struct tp_out *o = &tp_outs[nr][i];
		if (!(o->flags & TP_OUT_VALID))
			break;
		if (failed && !(o->flags & TP_OUT_ONERROR))
			continue;
		if (arg_of(c, o->arg) == 0)
			continue;
		if (count == 0)
			first = i;
		count++;
	}
	return count * 256 + first;
}

/* fill_header writes the record header of a call. */
static __always_inline void fill_header(struct tp_syscall *h, struct call_ctx *c, __u32 tid, __u32 tgid,
					__u64 seq, __u64 rip)
{
	h->type = TP_EV_SYSCALL;
	h->flags = TP_F_END;
	h->part = 0;
	h->tid = tid;
	h->tgid = tgid;
	h->nr = c->nr;
	h->seq = seq;
	__builtin_memcpy(h->args, c->args, sizeof(h->args));
	h->ret = c->ret;
	h->rip = rip;
	h->clock = c->clock;
	h->fs = c->fs;
}

/* send_small sends a call with one output of n <= cap bytes as one record
 * reserved in the ring buffer in place: header, one memory item, the data,
 * then an item of kind 0 (the end of the items) when room is left. The
 * reservation needs a size the verifier knows, so callers use a few fixed
 * capacities. It returns 0 when the bytes could not be read: the caller then
 * takes the general path, which says which pages were missing. */
static __always_inline int send_small(struct call_ctx *c, __u32 tid, __u32 tgid, __u64 seq, __u64 rip,
				      __u64 ptr, __u64 n, const __u32 cap, int crowded)
{
	__u8 *r = bpf_ringbuf_reserve(&events, sizeof(struct tp_syscall) + TP_ITEM + cap, 0);
	if (!r) {
		struct tp_counters *ct = counters_get();
		if (ct)
			ct->lost_records++;
		return 1;
	}
	n = opaque(n);
	if (n > cap || bpf_probe_read_user(r + sizeof(struct tp_syscall) + TP_ITEM, n, (void *)ptr)) {
		bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);
		return 0;
	}
	fill_header((struct tp_syscall *)r, c, tid, tgid, seq, rip);
	struct tp_item *it = (void *)(r + sizeof(struct tp_syscall));
	it->kind = TP_ITEM_MEM;
	it->pad[0] = it->pad[1] = it->pad[2] = 0;
	it->len = n;
	it->addr = ptr;
	__u64 used = (n + 7) & ~7ULL;
	if (used + TP_ITEM <= cap) {
		struct tp_item *end = (void *)(r + sizeof(struct tp_syscall) + TP_ITEM + used);
		end->kind = 0;
		end->len = 0;
		end->addr = 0;
	}
	bpf_ringbuf_submit(r, wake_flags(crowded));
	return 1;
}

/*
 * Two things need the recorder while the thread runs, so the thread is sent
 * SIGURG (default action: ignore) at a call's exit: the recorder, tracing
 * it, intercepts the signal at its signal-delivery stop, right after the
 * call returns, acts, and suppresses the signal.
 *  - A file mapping's content must be taken while the mapping (or the
 *    descriptor) still exists: a loader maps ld.so.cache and unmaps it
 *    within microseconds, long before the next boundary. After a successful
 *    mmap of a file, the recorder opens the file at the stop.
 *  - A ring buffer more than half full means the reader is falling behind
 *    (a program reading a cached file in a loop writes hundreds of MB a
 *    second into it): the recorder holds the thread until the reader has
 *    caught up, so the program slows down instead of losing records.
 * marks counts the signals sent, so the recorder tells them from a SIGURG of
 * the program's own. None is sent when SIGURG is blocked or already pending:
 * a signal of the program's would merge with it (standard signals do not
 * queue), and a blocked one would arrive too late to matter.
 */
#define TP_SIGURG 23
static __always_inline int file_mmap(struct call_ctx *call)
{
	return call->nr == 9 /* mmap */ && call->ret >= 0 && !(call->args[3] & 0x20 /* MAP_ANONYMOUS */) &&
	       (int)call->args[4] >= 0;
}

/* A call that installed a seccomp filter or strict mode: seccomp(2) with
 * SECCOMP_SET_MODE_STRICT or _FILTER, prctl(PR_SET_SECCOMP). The recorder
 * checks the filter before the thread runs on: its vDSO patch makes the time
 * functions syscalls, which the filter may refuse. */
static __always_inline int seccomp_install(struct call_ctx *call)
{
	return call->ret >= 0 && ((call->nr == 317 /* seccomp */ && (call->args[0] == 0 || call->args[0] == 1)) ||
				  (call->nr == 157 /* prctl */ && call->args[0] == 22 /* PR_SET_SECCOMP */));
}

static __always_inline void urge(struct tp_proc *p, struct call_ctx *call, int crowded)
{
	if (!(p->flags & TP_PROC_URGE) || !(file_mmap(call) || seccomp_install(call) || crowded))
		return;
	struct task_struct *t = bpf_get_current_task_btf();
	__u64 bit = 1ULL << (TP_SIGURG - 1);
	__u64 busy = t->blocked.sig[0] | t->pending.signal.sig[0] | t->signal->shared_pending.signal.sig[0];
	if (busy & bit)
		return;
	if (bpf_send_signal_thread(TP_SIGURG) == 0)
		__sync_fetch_and_add(&p->marks, 1);
}

/* A call with nothing to copy: its header alone, reserved in the ring buffer
 * in place. */
static __always_inline void send_header(struct call_ctx *call, __u32 tid, __u32 tgid, __u64 seq, __u64 ip, int crowded)
{
	struct tp_syscall *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
	if (!h) {
		struct tp_counters *c = counters_get();
		if (c)
			c->lost_records++;
		return;
	}
	fill_header(h, call, tid, tgid, seq, ip);
	bpf_ringbuf_submit(h, wake_flags(crowded));
}

SEC("tp_btf/sys_exit")
int BPF_PROG(tp_sys_exit, struct pt_regs *regs, long ret)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tgid = pt >> 32, tid = (__u32)pt;
	struct tp_proc *p = traced_proc(tgid);
	if (!p)
		return 0;
	/* The registers still hold the number and the arguments of the call
	 * (the kernel leaves them as the program set them), except after
	 * rt_sigreturn, which restores the interrupted context and sets orig_ax
	 * to -1 (arch/x86/kernel/signal_64.c), and a successful execve, which
	 * starts the new program with cleared registers: the number stays, and
	 * an exec is recorded only to say the interval cannot be replayed.
	 * uretprobe and uprobe, the kernel's own trampolines, also leave -1;
	 * they run only in a process with uprobes attached, which the recorder
	 * refuses to replay from. */
	struct call_ctx call = {.nr = (long)regs->orig_ax, .ret = ret};
	if (call.nr == -1) {
		call.nr = 15; /* rt_sigreturn */
	} else {
		/* The child of clone or fork leaves the call it never entered
		 * (kernel/entry: ret_from_fork ends in syscall_exit_to_user_mode)
		 * with 0; its parent sees the child's id or an error. */
		if (ret == 0 && (call.nr == 56 || call.nr == 57 || call.nr == 58 || call.nr == 435)) {
			struct tp_counters *c = counters_get();
			if (c)
				c->no_entry++;
			return 0;
		}
		call.args[0] = regs->di;
		call.args[1] = regs->si;
		call.args[2] = regs->dx;
		call.args[3] = regs->r10;
		call.args[4] = regs->r8;
		call.args[5] = regs->r9;
	}
	if (restarting(ret)) {
		if (ret == -516 && call.nr != TP_NR_RESTART)
			bpf_map_update_elem(&restarts, &tid, (struct tp_entry *)&call, BPF_ANY);
		return 0;
	}
	/* The clock log's counter before the number: an entry it logged
	 * below the value read came before this call (recorder/clocklog.go). */
	call.clock = TP_CLOCK_NONE;
	if (p->clock) {
		__u64 v;
		call.clock = bpf_probe_read_user(&v, sizeof(v), (void *)p->clock) ? TP_CLOCK_UNREAD : v;
	}
	call.fs = bpf_get_current_task_btf()->thread.fsbase;
	__u64 seq = __sync_fetch_and_add(&p->seq, 1) + 1;
	/* One look at the ring buffer's fill for the whole call. */
	int crowded = ring_crowded();
	urge(p, &call, crowded);

	int outs = call.nr == TP_NR_RESTART ? -1 : tp_outputs(&call);
	int nout = outs < 0 ? -1 : (int)((__u32)outs >> 8), first = outs & 255;
	const struct tp_out *o = NULL;
	if (call.nr >= 0 && call.nr <= TP_MAX_SYSNUM && first < TP_MAX_OUTS)
		o = &tp_outs[call.nr][first];
	if (nout == 0) {
		send_header(&call, tid, tgid, seq, regs->ip, crowded);
		return 0;
	}
	if (nout == 1 && o && o->kind == TP_OUT_PLAIN && o->size != TP_SIZE_ARGPTR) {
		/* One small output (clock_gettime, fstat, a short read,
		 * epoll_wait's few events): no scratch copy, no loops. */
		__u64 ptr = arg_of(&call, o->arg), n = plain_len(&call, o);
		if (n == 0) {
			send_header(&call, tid, tgid, seq, regs->ip, crowded);
			return 0;
		}
		if (n <= TP_SMALL && send_small(&call, tid, tgid, seq, regs->ip, ptr, n, TP_SMALL, crowded))
			return 0;
		if (n > TP_SMALL && n <= TP_MEDIUM && send_small(&call, tid, tgid, seq, regs->ip, ptr, n, TP_MEDIUM, crowded))
			return 0;
	}

	struct tp_scratch *s = scratch_get();
	if (!s)
		return 0;
	struct tp_syscall *h = (void *)s->buf;
	h->type = TP_EV_SYSCALL;
	h->flags = 0;
	h->part = 0;
	h->tid = tid;
	h->tgid = tgid;
	h->nr = call.nr;
	h->seq = seq;
	__builtin_memcpy(h->args, call.args, sizeof(h->args));
	h->ret = ret;
	h->rip = regs->ip;
	h->clock = call.clock;
	h->fs = call.fs;
	s->off = sizeof(*h);
	s->budget = max_capture;
	s->tid = tid;
	s->tgid = tgid;
	s->seq = seq;
	s->part = 0;

	if (call.nr == TP_NR_RESTART) {
		struct tp_entry *r = bpf_map_lookup_elem(&restarts, &tid);
		if (r) {
			h->flags |= TP_F_RESTARTED;
			call.nr = r->nr;
			__builtin_memcpy(call.args, r->args, sizeof(call.args));
			bpf_map_delete_elem(&restarts, &tid);
			__u32 off = s->off;
			if (off <= TP_CHUNK) {
				struct tp_item *it = (void *)&s->buf[off];
				it->kind = TP_ITEM_RESTART;
				it->len = 56;
				it->addr = 0;
				__builtin_memcpy(&s->buf[off + TP_ITEM], &call.nr, 8);
				__builtin_memcpy(&s->buf[off + TP_ITEM + 8], call.args, 48);
				s->off = off + TP_ITEM + 56;
			}
		}
	}
	bpf_loop(TP_MAX_OUTS, out_step, &call, 0);
	tp_flush(1);
	return 0;
}

static __always_inline void on_fault(__u64 addr, __u64 ip, __u64 err, __u8 kernel)
{
	if (addr >= TP_USER_END)
		return;
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tgid = pt >> 32;
	struct tp_proc *p = traced_proc(tgid);
	if (!p)
		return;
	__u64 epoch = p->epoch, w = (err & TP_PF_WRITE) ? 1 : 0;
	struct tp_page_key k = {.tgid = tgid, .page = addr & ~(TP_PAGE - 1)};
	__u64 *last = bpf_map_lookup_elem(&pages, &k);
	__u64 mark = epoch * 2 + w;
	if (last && *last / 2 == epoch) {
		if ((*last & 1) || !w)
			return;
	}
	struct tp_fault *f = bpf_ringbuf_reserve(&events, sizeof(*f), 0);
	if (!f) {
		struct tp_counters *c = counters_get();
		if (c)
			c->lost_faults++;
		return;
	}
	f->type = TP_EV_FAULT;
	f->flags = (w ? TP_FAULT_WRITE : 0) | (kernel ? TP_FAULT_KERNEL : 0);
	f->pad = 0;
	f->tid = (__u32)pt;
	f->tgid = tgid;
	f->pad2 = 0;
	f->addr = k.page;
	f->ip = ip;
	f->epoch = epoch;
	bpf_ringbuf_submit(f, wakeup_flags());
	/* A page faulted in an earlier interval (a server's heap pages, at
	 * each boundary's copy-on-write) has its entry: written in place. An
	 * update of an LRU map takes a new element and frees the old one:
	 * 1.2 us a fault on a redis-server under load. */
	if (last)
		*last = mark;
	else
		bpf_map_update_elem(&pages, &k, &mark, BPF_ANY);
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(tp_fault_user, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	on_fault(address, regs->ip, error_code, 0);
	return 0;
}

SEC("tp_btf/page_fault_kernel")
int BPF_PROG(tp_fault_kernel, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	on_fault(address, regs->ip, error_code, 1);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(tp_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	if (ptgid == ctgid)
		return 0; /* a new thread: the tgid is already there */
	struct tp_proc *p = traced_proc(ptgid);
	if (!p || !(p->flags & TP_PROC_FOLLOW_FORK))
		return 0;
	/* Only the recorded process is stopped at its file mmaps. */
	struct tp_proc c = {.epoch = p->epoch, .flags = p->flags & ~TP_PROC_URGE};
	if (bpf_map_update_elem(&traced, &ctgid, &c, BPF_NOEXIST))
		return 0;
	__u32 i = ctgid / 64;
	__u64 *w = bpf_map_lookup_elem(&traced_bits, &i);
	if (w)
		__sync_fetch_and_or(w, 1ULL << (ctgid & 63));
	return 0;
}

/* Only the first argument: kernels before 6.16 pass no group_dead. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(tp_exit, struct task_struct *task)
{
	__u32 tid = task->pid, tgid = task->tgid;
	if (!traced_proc(tgid))
		return 0;
	bpf_map_delete_elem(&restarts, &tid);
	/* kernel/exit.c: do_exit drops signal->live before this tracepoint. */
	if (BPF_CORE_READ(task, signal, live.counter) == 0) {
		bpf_map_delete_elem(&traced, &tgid);
		__u32 i = tgid / 64;
		__u64 *w = bpf_map_lookup_elem(&traced_bits, &i);
		if (w)
			__sync_fetch_and_and(w, ~(1ULL << (tgid & 63)));
	}
	return 0;
}
