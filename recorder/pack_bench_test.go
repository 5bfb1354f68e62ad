package recorder

import (
	"testing"

	"github.com/tprec/tprec/format"
)

// ddInterval is a quarter second of dd if=/dev/zero of=/dev/null bs=512:
// reads of 512 zero bytes and writes, 200,000 calls.
func ddInterval() callLog {
	var l callLog
	zeros := make([]byte, 512)
	for i := range 100000 {
		l.append(&format.Syscall{Seq: uint64(2*i + 1), Tid: 100, Nr: 0, Args: [6]uint64{0, 0x5000, 512}, Ret: 512, Rip: 0x7f0000001234,
			Out: []format.OutBuf{{Addr: 0x5000, Data: zeros}}})
		l.append(&format.Syscall{Seq: uint64(2*i + 2), Tid: 100, Nr: 1, Args: [6]uint64{1, 0x5000, 512}, Ret: 512, Rip: 0x7f0000001244})
	}
	return l
}

func BenchmarkPackDDInterval(b *testing.B) {
	l := ddInterval()
	var n int64
	for b.Loop() {
		n = l.pack().bytes
	}
	b.ReportMetric(float64(l.bytes), "logbytes")
	b.ReportMetric(float64(n), "packedbytes")
}

func BenchmarkBuildDDInterval(b *testing.B) {
	for b.Loop() {
		ddInterval()
	}
}
