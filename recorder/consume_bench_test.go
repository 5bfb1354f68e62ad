package recorder

import (
	"bytes"
	"testing"

	"github.com/tprec/tprec/bpf"
	"golang.org/x/sys/unix"
)

// serverRecords is what the eBPF programs send for a redis-server under
// redis-benchmark: per request an epoll_wait reporting one event, a read of
// the request and a write of the reply, with a fault now and then.
func serverRecords(n int) [][]byte {
	end := uint8(bpf.TprecTpRecFlagsTP_F_END)
	req := bytes.Repeat([]byte("*3\r\n$3\r\nSET\r\n$16\r\nkey:000000012345\r\n$3\r\nxxx\r\n"), 1)
	var recs [][]byte
	seq := uint64(1)
	for i := range n {
		fd := uint64(8 + i%10)
		ev := make([]byte, 12)
		ev[0], ev[4] = 1, byte(fd)
		recs = append(recs,
			encodeSyscall(bpf.TprecTpSyscall{Flags: end, Tid: 7, Tgid: 7, Nr: unix.SYS_EPOLL_WAIT, Seq: seq, Args: [6]uint64{5, 0x7f0000100000, 10128, 100}, Ret: 1, Rip: 0x7f00001234},
				item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x7f0000100000, data: ev}),
			encodeSyscall(bpf.TprecTpSyscall{Flags: end, Tid: 7, Tgid: 7, Nr: unix.SYS_READ, Seq: seq + 1, Args: [6]uint64{fd, 0x7f0000200000 + fd<<16, 16384}, Ret: int64(len(req)), Rip: 0x7f00002234},
				item{kind: bpf.TprecTpItemKindTP_ITEM_MEM, addr: 0x7f0000200000 + fd<<16, data: req}),
			encodeSyscall(bpf.TprecTpSyscall{Flags: end, Tid: 7, Tgid: 7, Nr: unix.SYS_WRITE, Seq: seq + 2, Args: [6]uint64{fd, 0x7f0000300000, 5}, Ret: 5, Rip: 0x7f00003234}))
		seq += 3
		if i%8 == 0 {
			f := bpf.TprecTpFault{Type: uint8(bpf.TprecTpEventTypeTP_EV_FAULT), Tgid: 7, Addr: 0x5000000 + uint64(i%2000)<<12, Flags: uint8(bpf.TprecTpFaultFlagsTP_FAULT_WRITE)}
			recs = append(recs, append([]byte(nil), asBytes(&f)...))
		}
	}
	return recs
}

// BenchmarkConsumeServer is the reader's work per call on a server's
// records: decode, build, number and encode into the interval's log.
func BenchmarkConsumeServer(b *testing.B) {
	recs := serverRecords(10000)
	calls := 0
	for b.Loop() {
		e := &ebpfSource{pid: 7, calls: map[uint64]*pendingCall{}, faults: map[uint64]uint8{}}
		e.log = &openLog{firstQ: 1, nextQ: 1}
		for _, r := range recs {
			e.consume(r)
		}
		calls = e.log.calls.len()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(calls), "ns/call")
}

// BenchmarkMergeClock is the reader's work per clock read of the clock log:
// take the entry, make its record and encode it into the interval's log,
// for one thread alternating clock_gettime and gettimeofday as redis does.
func BenchmarkMergeClock(b *testing.B) {
	const reads = 100000
	calls := 0
	for b.Loop() {
		cl := fakeClockLog()
		cm := &clockMerge{l: cl, fsTid: map[uint64]int{}}
		cm.thread(0xa000, 10)
		l := &openLog{firstQ: 1, nextQ: 1, cm: cm}
		for i := uint64(0); i < reads; i += clkEntries / 2 {
			b.StopTimer()
			for k := i; k < i+clkEntries/2; k++ {
				nr := unix.SYS_CLOCK_GETTIME
				if k%2 == 1 {
					nr = unix.SYS_GETTIMEOFDAY
				}
				cl.put(k, 0xa000, nr, 1_700_000_000_000_000_000+k*1500, true)
			}
			b.StartTimer()
			if !l.mergeClock(i + clkEntries/2) {
				b.Fatal("an entry was not there")
			}
		}
		calls = l.calls.len()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(calls), "ns/read")
}
