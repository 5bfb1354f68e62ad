/* Events the tprec eBPF programs send to the recorder through the ring
 * buffer. The Go side uses the types bpf2go generates from these structs
 * (-type), and recorder/ebpf_layout_test.go checks them against the object's
 * BTF. Every record starts with a u8 type (enum tp_event_type): keep it in
 * sync with recorder/ebpf_decode.go. */
#ifndef TPREC_H
#define TPREC_H

enum tp_event_type {
	TP_EV_SYSCALL = 1, /* struct tp_syscall, then items */
	TP_EV_PART = 2,    /* struct tp_part, then items: continuation of a syscall */
	TP_EV_FAULT = 3,   /* struct tp_fault */
};

/* flags of tp_syscall and tp_part */
enum tp_rec_flags {
	TP_F_END = 1,       /* last record of this syscall */
	TP_F_RESTARTED = 2, /* restart_syscall: outputs follow the restarted call */
};

/* Item kinds, after a tp_syscall or tp_part header. */
enum tp_item_kind {
	TP_ITEM_MEM = 1,        /* len bytes of memory at addr follow (padded to 8) */
	TP_ITEM_UNREADABLE = 2, /* len bytes at addr could not be read */
	TP_ITEM_TOOBIG = 3,     /* len bytes at addr were not copied: over the per-call limit */
	TP_ITEM_RESTART = 4,    /* len = 56: the restarted call's nr (u64) and args[6] follow */
	TP_ITEM_UNSUPPORTED = 5, /* an output of a shape the capture does not walk (addr = arg) */
};

struct tp_syscall {
	__u8 type;
	__u8 flags;
	__u16 part; /* 0 */
	__u32 tid;
	__u32 tgid;
	__s32 nr;
	__u64 seq; /* per-process order, from 1 */
	__u64 args[6];
	__s64 ret;
	__u64 rip; /* user ip after the syscall instruction */
	/* The process's clock log counter, read before seq was taken: the
	 * clock reads logged below it came before this call. TP_CLOCK_NONE
	 * without a clock log, TP_CLOCK_UNREAD when it could not be read. */
	__u64 clock;
	__u64 fs; /* the thread's fs base */
};

#define TP_CLOCK_NONE (~0ULL)
#define TP_CLOCK_UNREAD (~0ULL - 1)

struct tp_part {
	__u8 type;
	__u8 flags;
	__u16 part; /* 1, 2, ... */
	__u32 tid;
	__u32 tgid;
	__u32 pad;
	__u64 seq;
};

struct tp_item {
	__u8 kind;
	__u8 pad[3];
	__u32 len;
	__u64 addr;
};

enum tp_fault_flags {
	TP_FAULT_WRITE = 1,
	TP_FAULT_KERNEL = 2, /* the kernel touched a user address (copy_to_user) */
};

struct tp_fault {
	__u8 type;
	__u8 flags;
	__u16 pad;
	__u32 tid;
	__u32 tgid;
	__u32 pad2;
	__u64 addr; /* page address */
	__u64 ip;
	__u64 epoch;
};

/* Value of the traced map, one per recorded process. */
struct tp_proc {
	__u64 seq;   /* last sequence number given */
	__u64 epoch; /* interval number, set by the recorder at each boundary */
	__u32 flags; /* TP_PROC_* */
	__u32 marks; /* SIGURGs sent to the recorder (urge in tprec.c) */
	__u64 clock; /* address of the clock log's counter in the process, or 0 */
};

enum tp_proc_flags {
	TP_PROC_FOLLOW_FORK = 1, /* children are added to the map */
	TP_PROC_URGE = 2,        /* the recorder traces it: stop a thread (SIGURG) when it must act */
};

/* Per-CPU counters, read by the recorder at every boundary. */
struct tp_counters {
	__u64 lost_records;  /* a syscall record (or part) the ring buffer had no room for */
	__u64 lost_faults;   /* a fault event the ring buffer had no room for */
	__u64 read_failures; /* bpf_probe_read_user failed (reported as items) */
	__u64 too_big;       /* outputs over the per-call limit */
	__u64 no_entry;      /* a sys_exit without its sys_enter (attached mid-call) */
};

#endif
