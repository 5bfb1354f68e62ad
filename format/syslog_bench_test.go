package format

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// serverLog is n calls of a key-value server's loop under load, the shape of
// a redis-server window: epoll_wait, the clock, a request read from one of
// ten client sockets (a random key among 100,000), the reply written.
func serverLog(n int) []Syscall {
	rng := rand.New(rand.NewPCG(1, 2))
	calls := make([]Syscall, 0, n)
	usec := uint64(1_700_000_000_000_000)
	mono := uint64(5_000_000_000)
	add := func(nr int, args [6]uint64, ret int64, rip uint64, out ...OutBuf) {
		calls = append(calls, Syscall{Seq: uint64(len(calls) + 1), Tid: 4000, Nr: nr, Args: args, Ret: ret, Rip: rip, Out: out})
	}
	timeval := func() []byte {
		usec += uint64(rng.IntN(40))
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, usec/1_000_000)
		binary.LittleEndian.PutUint64(b[8:], usec%1_000_000)
		return b
	}
	for len(calls) < n {
		fd := uint64(8 + rng.IntN(10))
		ev := make([]byte, 12)
		binary.LittleEndian.PutUint32(ev, 1)
		binary.LittleEndian.PutUint64(ev[4:], fd)
		add(232, [6]uint64{5, 0x7f00_1000_0000, 10128, 100}, 1, 0x7f00_0000_1100, OutBuf{Addr: 0x7f00_1000_0000, Data: ev})
		add(96, [6]uint64{0x7ffc_0000_1000}, 0, 0x7ffc_f000_0a00, OutBuf{Addr: 0x7ffc_0000_1000, Data: timeval()})
		req := []byte(fmt.Sprintf("*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$3\r\nxxx\r\n", rng.IntN(100000)))
		if rng.IntN(2) == 0 {
			req = []byte(fmt.Sprintf("*2\r\n$3\r\nGET\r\n$16\r\nkey:%012d\r\n", rng.IntN(100000)))
		}
		buf := 0x7f00_2000_0000 + fd<<16
		add(0, [6]uint64{fd, buf, 16384}, int64(len(req)), 0x7f00_0000_1200, OutBuf{Addr: buf, Data: req})
		mono += uint64(rng.IntN(40000))
		ts := make([]byte, 16)
		binary.LittleEndian.PutUint64(ts, mono/1_000_000_000)
		binary.LittleEndian.PutUint64(ts[8:], mono%1_000_000_000)
		add(228, [6]uint64{1, 0x7ffc_0000_2000}, 0, 0x7ffc_f000_0b00, OutBuf{Addr: 0x7ffc_0000_2000, Data: ts})
		add(96, [6]uint64{0x7ffc_0000_1000}, 0, 0x7ffc_f000_0a00, OutBuf{Addr: 0x7ffc_0000_1000, Data: timeval()})
		add(1, [6]uint64{fd, 0x7f00_3000_0000, 5}, 5, 0x7f00_0000_1300)
	}
	return calls[:n]
}

// A quarter second of such a server's calls (100,000), encoded as the
// recorder's ring and the writer do, and decoded as the dump's assembly and
// tpreplay's load do.
func BenchmarkEncodeServerLog(b *testing.B) {
	calls := serverLog(100000)
	var n int
	for b.Loop() {
		n = len(encodeSyscallsRaw(len(calls), slicePointers(calls)))
	}
	b.ReportMetric(float64(n)/float64(len(calls)), "rawB/call")
}

func BenchmarkDecodeServerLog(b *testing.B) {
	calls := serverLog(100000)
	raw := encodeSyscallsRaw(len(calls), slicePointers(calls))
	b.ReportAllocs()
	for b.Loop() {
		d := &dec{b: raw}
		if got := decodeSyscalls(d, VersionMajor); len(got) != len(calls) || d.fail != nil {
			b.Fatalf("%d calls decoded, %v", len(got), d.fail)
		}
	}
}
