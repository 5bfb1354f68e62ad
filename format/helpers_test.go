package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// pageMaker produces page contents of the kinds a real process has: zeros,
// text, pointer-rich data, repeated patterns and incompressible noise.
type pageMaker struct{ rng *rand.Rand }

func (m pageMaker) page(kind int) []byte {
	p := make([]byte, PageSize)
	switch kind % 5 {
	case 0: // zeros
	case 1: // text
		words := []string{"alpha ", "beta ", "gamma\n", "request ", "GET /index.html ", "200 OK\n"}
		for i := 0; i < len(p); {
			i += copy(p[i:], words[m.rng.IntN(len(words))])
		}
	case 2: // pointers into a heap
		base := uint64(0x55550000_0000) + uint64(m.rng.IntN(1<<20))*16
		for i := 0; i+8 <= len(p); i += 8 {
			binary.LittleEndian.PutUint64(p[i:], base+uint64(m.rng.IntN(4096))*8)
		}
	case 3: // a repeated record
		rec := make([]byte, 24+m.rng.IntN(40))
		for i := range rec {
			rec[i] = byte(m.rng.IntN(256))
		}
		for i := 0; i < len(p); i += len(rec) {
			copy(p[i:], rec)
		}
	case 4: // noise
		for i := range p {
			p[i] = byte(m.rng.IntN(256))
		}
	}
	return p
}

func regsFor(rng *rand.Rand) Regs {
	var r Regs
	for _, v := range regsList(&r) {
		*v = rng.Uint64()
	}
	r.Cs, r.Ss = 0x33, 0x2b
	return r
}

func xstate(rng *rand.Rand) []byte {
	x := make([]byte, 2696)
	for i := 0; i < 160; i++ {
		x[rng.IntN(len(x))] = byte(rng.IntN(256))
	}
	return x
}

func siginfo(signo int, code int32, addr uint64) []byte {
	b := make([]byte, 128)
	binary.LittleEndian.PutUint32(b[0:], uint32(signo))
	binary.LittleEndian.PutUint32(b[8:], uint32(code))
	binary.LittleEndian.PutUint64(b[16:], addr)
	return b
}

// richCheckpoint builds a checkpoint with everything the format carries:
// several intervals of several threads, thousands of pages among which
// duplicates and zero pages, syscalls with outputs, signals and an end state.
func richCheckpoint(seed uint64, intervals, pagesPer, syscalls int) (*Checkpoint, *MemStore) {
	rng := rand.New(rand.NewPCG(seed, 42))
	mk := pageMaker{rng}
	store := NewMemStore()
	start := time.Unix(1_790_000_000, 123_456_789).UTC()
	c := &Checkpoint{Header: Header{
		Arch:          "x86_64",
		KernelRelease: "6.18.0-tprec",
		CPUFlags:      []string{"fpu", "sse2", "avx2", "xsave", "rdrand"},
		Hostname:      "build-7",
		ExePath:       "/usr/local/bin/server",
		BuildID:       "4f1c2a9e0b7d33aa",
		Cmdline:       []string{"./server", "--port", "8080", ""},
		Pid:           4242,
		Backend:       "ebpf",
		Interval:      250 * time.Millisecond,
		PageSetNote:   "trial replay served 812 pages",
		StartTime:     start,
		DumpTime:      start.Add(2 * time.Second),
		Reason:        "signal",
		Lost:          3,
		Modules: []Module{
			{Name: "", LinkMap: 0x7f0000001000, LAddr: 0x555555554000, LD: 0x555555557dc8, TLSModID: 1, TLSOffset: 0x10},
			{Name: "/lib/x86_64-linux-gnu/libc.so.6", LinkMap: 0x7f0000002000, LAddr: 0x7ffff7d80000, LD: 0x7ffff7f9a9c0, TLSModID: 2, TLSOffset: 0x90},
			{Name: "/lib64/ld-linux-x86-64.so.2", LinkMap: 0x7f0000003000, LAddr: 0x7ffff7fc3000, LD: 0x7ffff7ffce80},
		},
		ThreadNames: []ThreadName{{Tid: 4242, Name: "server"}, {Tid: 4243, Name: "worker 1"}},
	}}
	// A pool of pages that intervals draw from, so the same content appears
	// at several addresses and in several intervals.
	var pool []Hash
	for i := 0; i < pagesPer; i++ {
		pool = append(pool, store.Put(mk.page(i)))
	}
	heap := uint64(0x5555_5555_0000)
	seq := uint64(1)
	for k := 0; k < intervals; k++ {
		iv := Interval{
			Index:      17 + 2*k,
			Start:      start.Add(time.Duration(k) * 250 * time.Millisecond),
			End:        start.Add(time.Duration(k+1) * 250 * time.Millisecond),
			FirstSeq:   seq,
			Replayable: k != 1,
		}
		if !iv.Replayable {
			iv.Reason = "unsupported syscall io_uring_enter"
		}
		for t := 0; t < 3; t++ {
			iv.Threads = append(iv.Threads, Thread{Tid: 4242 + t, Regs: regsFor(rng), XState: xstate(rng), SigMask: rng.Uint64(), InSyscall: t == 1})
		}
		iv.Maps = []Mapping{
			{Start: 0x5555_5554_0000, End: 0x5555_5555_0000, Prot: ProtRead | ProtExec, Offset: 0x1000, Dev: "fd:01", Inode: 131, Path: "/usr/local/bin/server"},
			{Start: heap, End: heap + uint64(pagesPer*2)*PageSize, Prot: ProtRead | ProtWrite, Path: "[heap]"},
			{Start: 0x7f00_0000_0000, End: 0x7f00_0010_0000, Prot: ProtRead | ProtWrite, Shared: true, Dev: "00:01", Inode: 9, Path: "/dev/shm/ring"},
			{Start: 0x7ffc_0000_0000, End: 0x7ffc_0002_1000, Prot: ProtRead | ProtWrite, Path: "[stack]"},
		}
		for i := 0; i < pagesPer; i++ {
			if rng.IntN(3) == 0 {
				continue
			}
			iv.Written = append(iv.Written, PageRef{Addr: heap + uint64(i)*PageSize, Hash: pool[rng.IntN(len(pool))]})
		}
		c.Intervals = append(c.Intervals, iv)
		for i := 0; i < syscalls/intervals; i++ {
			s := Syscall{Seq: seq, Tid: 4242 + rng.IntN(3), Nr: rng.IntN(335), Ret: int64(rng.IntN(100)) - 20, Rip: 0x7f12_3456_7000 + uint64(rng.IntN(4096))}
			for j := range s.Args {
				s.Args[j] = rng.Uint64() >> rng.IntN(64)
			}
			if rng.IntN(4) == 0 {
				n := 1 + rng.IntN(3)
				for j := 0; j < n; j++ {
					data := mk.page(1 + rng.IntN(4))[:1+rng.IntN(PageSize)]
					s.Out = append(s.Out, OutBuf{Addr: heap + uint64(rng.IntN(1<<20)), Data: data})
				}
			}
			if rng.IntN(20) == 0 {
				// an mmap of a file, with the content of a few of its pages
				base := 0x7f00_0000_0000 + uint64(rng.IntN(1<<20))*PageSize
				for j := 0; j < 1+rng.IntN(4); j++ {
					s.Pages = append(s.Pages, PageRef{Addr: base + uint64(j)*PageSize, Hash: pool[rng.IntN(len(pool))]})
				}
			}
			c.Syscalls = append(c.Syscalls, s)
			seq += 1 + uint64(rng.IntN(2))
		}
	}
	for i := 0; i < pagesPer; i++ {
		if rng.IntN(2) == 0 {
			c.Final = append(c.Final, PageRef{Addr: heap + uint64(i)*PageSize, Hash: pool[rng.IntN(len(pool))]})
		}
	}
	c.Final = append(c.Final, PageRef{Addr: 0x7ffc_0002_0000, Hash: store.Put(mk.page(2))})
	for i := 0; i < 3; i++ {
		c.Signals = append(c.Signals, SignalEvent{Seq: seq / 2, Tid: 4243, Signo: 10 + i, Siginfo: siginfo(10+i, 0, 0), Regs: regsFor(rng), Interval: i})
	}
	c.End = EndState{
		Kind: EndSignal, Tid: 4242, Signo: 11, Siginfo: siginfo(11, 1, 0xdead0), Regs: regsFor(rng),
		XState: xstate(rng), LastSeq: seq - 1,
		Digests: []PageRef{{Addr: 0x7ffc_0002_0000, Hash: HashPage(mk.page(4))}, {Addr: heap, Hash: ZeroHash}},
	}
	// Version 3.1: what a delivery did.
	c.Signals[0].Handler = &Delivery{Regs: regsFor(rng), XState: xstate(rng), SigMask: 1 << 13, FrameAddr: 0x7ffc_0001_fb40, Frame: mk.page(5)[:1200],
		Digests: []PageRef{{Addr: 0x7ffc_0001_f000, Hash: HashPage(mk.page(6))}}}
	// Version 4.1: the other threads at the end.
	c.End.Threads = []Thread{{Tid: 4243, Regs: regsFor(rng), XState: xstate(rng), SigMask: 1 << 2, InSyscall: true}}
	return c, store
}

// smallCheckpoint is the seed-sized checkpoint committed under testdata/.
// It keeps every kind of record but few of each, so that a fuzzer mutating
// it reaches every decoder quickly.
func smallCheckpoint() (*Checkpoint, *MemStore) {
	c, store := richCheckpoint(7, 2, 6, 6)
	for i := range c.Intervals {
		iv := &c.Intervals[i]
		iv.Threads = iv.Threads[:2]
		for j := range iv.Threads {
			iv.Threads[j].XState = iv.Threads[j].XState[:64]
		}
		iv.Maps = iv.Maps[1:3]
	}
	c.End.XState = c.End.XState[:64]
	c.Signals = c.Signals[:1]
	for i := range c.Syscalls {
		for j := range c.Syscalls[i].Out {
			o := &c.Syscalls[i].Out[j]
			o.Data = o.Data[:min(len(o.Data), 40)]
		}
	}
	return c, store
}

// smallCheckpointV3 is smallCheckpoint with what version 3 added: one
// stored start, boundary digests for the other intervals, and time values
// that the log stores as differences (a clock_gettime every third call).
func smallCheckpointV3() (*Checkpoint, *MemStore) {
	c, store := smallCheckpoint()
	for i := range c.Intervals {
		iv := &c.Intervals[i]
		iv.StartOmitted = i > 0
		if i > 0 {
			iv.Digests = []PageRef{{Addr: 0x7ffc_0001_f000, Hash: HashPage(bytes.Repeat([]byte{byte(i)}, PageSize))}, {Addr: 0x5555_5555_0000, Hash: ZeroHash}}
		}
	}
	for i := range c.Syscalls {
		if i%3 != 0 {
			continue
		}
		s := &c.Syscalls[i]
		ts := make([]byte, 16)
		binary.LittleEndian.PutUint64(ts, 1_790_000_000+uint64(i/7))
		binary.LittleEndian.PutUint64(ts[8:], uint64(i)*7919%1_000_000_000)
		s.Nr, s.Out = 228, []OutBuf{{Addr: 0x7ffc_0001_fe00, Data: ts}}
	}
	return c, store
}

// smallCheckpointV5 is smallCheckpointV3 with outputs that repeat the
// compared record's (version 5): every fourth record reads the same 40
// bytes from descriptor 5, and every eighth from descriptor 6 (so the two
// alternate with a read of the other in between).
func smallCheckpointV5() (*Checkpoint, *MemStore) {
	c, store := smallCheckpointV3()
	same := bytes.Repeat([]byte("same line\n"), 4)
	for i := range c.Syscalls {
		if i%4 != 1 {
			continue
		}
		s := &c.Syscalls[i]
		s.Nr, s.Ret, s.Pages = 0, int64(len(same)), nil
		s.Args = [6]uint64{5, 0x5555_0000_1000, 4096}
		if i%8 == 5 {
			s.Args[0] = 6
		}
		s.Out = []OutBuf{{Addr: 0x5555_0000_1000, Data: same}}
	}
	return c, store
}

// smallCheckpointV6 is smallCheckpointV5 with the outputs version 6 keyed
// differently from what FORMAT.md said: getrlimit(RLIMIT_CPU) (97, first
// argument 0) then gettimeofday (96) returning the same 16 bytes. Version 6
// kept the last outputs of the calls by number in the slot of the number
// rounded up to odd with first argument 0, so that gettimeofday's repeated
// getrlimit's bytes; version 7 keeps them apart.
func smallCheckpointV6() (*Checkpoint, *MemStore) {
	c, store := smallCheckpointV5()
	same := []byte("sixteen bytes ok")
	s := &c.Syscalls[3]
	s.Nr, s.Args, s.Ret, s.Pages = 97, [6]uint64{0, 0x5555_0000_2000}, 0, nil
	s.Out = []OutBuf{{Addr: 0x5555_0000_2000, Data: same}}
	s = &c.Syscalls[4]
	s.Nr, s.Args, s.Ret, s.Pages = 96, [6]uint64{0x5555_0000_3000}, 0, nil
	s.Out = []OutBuf{{Addr: 0x5555_0000_3000, Data: same}}
	return c, store
}

// legacy is what a file written before version 3 decodes to for model c:
// every interval's start is stored, and there are no boundary digests.
func legacy(c *Checkpoint) *Checkpoint {
	for i := range c.Intervals {
		c.Intervals[i].StartOmitted = false
		c.Intervals[i].Digests = nil
	}
	return noDeliveries(c)
}

// noDeliveries drops what version 3.1 added to the signals.
// noEndThreads strips what version 4.1 added: the other threads at the end.
func noEndThreads(c *Checkpoint) *Checkpoint {
	c.End.Threads = nil
	return c
}

func noDeliveries(c *Checkpoint) *Checkpoint {
	for i := range c.Signals {
		c.Signals[i].Interval, c.Signals[i].Handler = 0, nil
	}
	return c
}

func encode(t testing.TB, c *Checkpoint, pages PageSource) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Encode(&b, c, pages); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b.Bytes()
}

func decodeBytes(b []byte) (*File, error) { return Decode(bytes.NewReader(b), int64(len(b))) }

// referenced lists every hash a checkpoint names as page content.
func referenced(c *Checkpoint) []Hash {
	var out []Hash
	for _, iv := range c.Intervals {
		for _, p := range iv.Written {
			out = append(out, p.Hash)
		}
	}
	for _, p := range c.Final {
		out = append(out, p.Hash)
	}
	for _, s := range c.Syscalls {
		for _, p := range s.Pages {
			out = append(out, p.Hash)
		}
	}
	return out
}

// sameCheckpoint compares two models field by field and names the first
// difference (reflect.DeepEqual alone says only "different").
func sameCheckpoint(a, b *Checkpoint) error {
	if reflect.DeepEqual(a, b) {
		return nil
	}
	av, bv := reflect.ValueOf(*a), reflect.ValueOf(*b)
	for i := 0; i < av.NumField(); i++ {
		if !reflect.DeepEqual(av.Field(i).Interface(), bv.Field(i).Interface()) {
			return fmt.Errorf("field %s differs:\n got  %+.300v\n want %+.300v", av.Type().Field(i).Name, bv.Field(i).Interface(), av.Field(i).Interface())
		}
	}
	return fmt.Errorf("models differ")
}

// packSyscalls encodes calls as a SYSCL payload compressed with lz4, and
// unpackSyscalls decodes it: the encoding's round trip, for the tests.
func packSyscalls(calls []Syscall) []byte {
	return encodeSyscalls(&codec{}, calls)
}

func unpackSyscalls(b []byte) ([]Syscall, error) {
	d := &dec{b: b, sec: "SYSCL"}
	raw := unpack(d, &codec{})
	if d.fail != nil {
		return nil, d.fail
	}
	d2 := &dec{b: raw, base: -1, sec: "SYSCL"}
	calls := decodeSyscalls(d2, VersionMajor)
	d2.end(true)
	if d2.fail != nil {
		return nil, d2.fail
	}
	return calls, nil
}
