package recorder

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// noise is an incompressible page.
func noise(seed int64) []byte {
	p := make([]byte, format.PageSize)
	rand.New(rand.NewSource(seed)).Read(p)
	return p
}

func page(b byte) []byte { return bytes.Repeat([]byte{b}, format.PageSize) }

// ringName is the name the ring gives a page's content.
func ringName(r *ring, data []byte) format.Hash {
	if bytes.Equal(data, zeroPage) {
		return format.ZeroHash
	}
	return r.key(data)
}

// Two contents the ring's hash gives one name (forced here by storing one
// under the other's name) are both kept, each under a name of its own.
func TestRingNamesCollisionKeepsBoth(t *testing.T) {
	r := newRing(4, 1<<30)
	a, b := noise(1), noise(2)
	r.pages[r.key(b)] = r.store(r.key(b), 0x1000, a) // a under b's name
	iv := &interval{meta: format.Interval{Index: 0}}
	r.addPage(iv, 0x2000, b)
	r.addPage(iv, 0x3000, a)
	w := iv.meta.Written
	if w[0].Hash == r.key(b) || w[0].Hash == w[1].Hash {
		t.Fatalf("b was named %x, a %x; the name held by a's content is %x", w[0].Hash, w[1].Hash, r.key(b))
	}
	for i, want := range [][]byte{b, a} {
		if got, err := r.page(w[i].Hash); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("page %d reads back wrong: %v", i, err)
		}
	}
}

func TestRingKeepsNewestAndSharesPages(t *testing.T) {
	r := newRing(3, 1<<30)
	for i := 0; i < 5; i++ {
		iv := &interval{meta: format.Interval{Index: i}}
		r.addPage(iv, 0x1000, page(1))          // the same content every interval
		r.addPage(iv, 0x2000, page(byte(10+i))) // new content
		r.addPage(iv, 0x3000, page(0))          // zeros are never stored
		r.push(iv, true)
	}
	if len(r.intervals) != 3 || r.intervals[0].meta.Index != 2 || r.intervals[2].meta.Index != 4 {
		t.Fatalf("ring holds %d intervals, first %d", len(r.intervals), r.intervals[0].meta.Index)
	}
	if len(r.pages) != 4 { // page(1) once + three distinct
		t.Fatalf("ring stores %d distinct pages, want 4", len(r.pages))
	}
	for _, iv := range r.intervals {
		for _, p := range iv.meta.Written {
			got, err := r.page(p.Hash)
			if err != nil || ringName(r, got) != p.Hash {
				t.Fatalf("page %x: %v", p.Hash, err)
			}
		}
	}
	if _, err := r.page(r.key(page(99))); err == nil {
		t.Fatal("a page that was never stored is found")
	}
}

func TestRingMemoryLimitDropsOldest(t *testing.T) {
	r := newRing(100, 3*format.PageSize)
	for i := 0; i < 10; i++ {
		iv := &interval{meta: format.Interval{Index: i}}
		// Incompressible content, so each page costs a whole page.
		r.addPage(iv, 0x1000, noise(int64(i)))
		r.push(iv, true)
		if r.bytes > 3*format.PageSize && len(r.intervals) > 1 {
			t.Fatalf("ring holds %d bytes with %d intervals", r.bytes, len(r.intervals))
		}
	}
	if r.intervals[len(r.intervals)-1].meta.Index != 9 {
		t.Fatal("the newest interval was dropped")
	}
	// A single interval larger than the limit is still kept.
	big := &interval{meta: format.Interval{Index: 10}}
	for a := uint64(0); a < 8; a++ {
		r.addPage(big, a*format.PageSize, noise(int64(100+a)))
	}
	r.push(big, true)
	if len(r.intervals) != 1 || r.intervals[0].meta.Index != 10 {
		t.Fatalf("want only the newest interval, have %d", len(r.intervals))
	}
}

func TestNormalizeRestartedSyscall(t *testing.T) {
	// Interrupted read: rax=-ERESTARTSYS, orig_rax=0, rip past the syscall.
	r := format.Regs{Rax: uint64(0xfffffffffffffe00), OrigRax: 0, Rip: 0x1002}
	n, in := normalize(r)
	if !in || n.Rip != 0x1000 || n.Rax != 0 || n.OrigRax != ^uint64(0) {
		t.Fatalf("normalize read: %+v %v", n, in)
	}
	// Interrupted nanosleep: the kernel resumes it through restart_syscall, the
	// normalized state re-issues the call itself.
	r = format.Regs{Rax: uint64(0xfffffffffffffdfc), OrigRax: unix.SYS_CLOCK_NANOSLEEP, Rip: 0x2002}
	n, in = normalize(r)
	if !in || n.Rip != 0x2000 || n.Rax != unix.SYS_CLOCK_NANOSLEEP {
		t.Fatalf("normalize nanosleep: %+v", n)
	}
	// Not in a syscall: untouched.
	r = format.Regs{Rax: uint64(0xfffffffffffffe00), OrigRax: ^uint64(0), Rip: 0x3000}
	if n, in = normalize(r); in || n != r {
		t.Fatalf("normalize outside a syscall changed %+v", n)
	}
}

func TestSameFrame(t *testing.T) {
	p := uint64(proc.PMPresent)
	cases := []struct {
		a, b uint64
		want bool
	}{
		{0, 0, true},          // absent in both
		{p | 5, p | 5, true},  // still shared
		{p | 5, p | 6, false}, // copy-on-write broke
		{p | 5, 0, false},     // appeared in the target
		{0, p | 5, false},     // gone from the target
		{proc.PMSwapped | 9, proc.PMSwapped | 9, true},
	}
	for _, c := range cases {
		if got := sameFrame(c.a, c.b); got != c.want {
			t.Errorf("sameFrame(%#x, %#x) = %v", c.a, c.b, got)
		}
	}
}

func TestUnionPages(t *testing.T) {
	got := unionPages([]pageRun{{0x1000, 0x3000}}, []pageRun{{0x2000, 0x4000}, {0x8000, 0x9000}})
	if want := []uint64{0x1000, 0x2000, 0x3000, 0x8000}; !slices.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
	// Against the definition, on runs that overlap, nest, touch and come in
	// any order.
	rnd := rand.New(rand.NewSource(1))
	runs := func() []pageRun {
		var rs []pageRun
		for range rnd.Intn(6) {
			a := uint64(rnd.Intn(40)) * format.PageSize
			rs = append(rs, pageRun{a, a + uint64(1+rnd.Intn(8))*format.PageSize})
		}
		return rs
	}
	for range 2000 {
		a, b := runs(), runs()
		set := map[uint64]bool{}
		for _, r := range slices.Concat(a, b) {
			for p := r.start; p < r.end; p += format.PageSize {
				set[p] = true
			}
		}
		want := slices.Sorted(maps.Keys(set))
		if got := unionPages(a, b); !slices.Equal(got, want) {
			t.Fatalf("unionPages(%x, %x) = %x, want %x", a, b, got, want)
		}
	}
}

// Pages of a mapping gone at the interval end are saved: the present ones,
// and every page of a small file mapping; a mapping still there with the
// same backing (even split by mprotect) is not.
func TestVanishedPages(t *testing.T) {
	const pg = format.PageSize
	start := []format.Mapping{
		{Start: 0x10000, End: 0x14000, Prot: format.ProtRead, Shared: true, Inode: 7, Dev: "fd:01", Path: "/data"},
		{Start: 0x20000, End: 0x22000, Prot: format.ProtRead | format.ProtWrite},
		{Start: 0x30000, End: 0x34000, Prot: format.ProtRead, Inode: 9, Path: "/lib.so"},
	}
	now := []format.Mapping{
		{Start: 0x30000, End: 0x32000, Prot: format.ProtRead, Inode: 9, Path: "/lib.so"},
		{Start: 0x32000, End: 0x34000, Prot: format.ProtRead | format.ProtExec, Inode: 9, Path: "/lib.so", Offset: 0x2000},
	}
	present := []pageRun{{0x10000, 0x10000 + pg}, {0x20000, 0x22000}, {0x30000, 0x34000}}
	got := vanishedPages(start, present, now, nil)
	want := []uint64{0x10000, 0x11000, 0x12000, 0x13000, 0x20000, 0x21000}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("vanished %x, want %x", got, want)
	}
	// The same file mapped again at the same place by the end, after an
	// munmap in the interval: its start content is saved all the same; an
	// unrelated mapping next to the munmapped range is not.
	again := append([]format.Mapping{start[0]}, now...)
	got = vanishedPages(start, present, again, []format.Span{{Lo: 0x10000, Hi: 0x14000}})
	want = []uint64{0x10000, 0x11000, 0x12000, 0x13000, 0x20000, 0x21000}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("remapped: vanished %x, want %x", got, want)
	}
	// Spans in any order, one inside another: a page counts when any covers it.
	got = vanishedPages(start, present, again, []format.Span{{Lo: 0x30000, Hi: 0x31000}, {Lo: 0x10000, Hi: 0x11000}, {Lo: 0xf000, Hi: 0x13000}})
	if fmt.Sprintf("%x", got) != "[10000 11000 12000 20000 21000 30000]" {
		t.Errorf("several spans: vanished %x", got)
	}
	if got = vanishedPages(start, present, again, nil); fmt.Sprintf("%x", got) != "[20000 21000]" {
		t.Errorf("remapped, without the munmap: vanished %x, want [20000 21000]", got)
	}
	if got := mergePages([]uint64{1, 3, 5}, []uint64{2, 3, 6}); fmt.Sprint(got) != "[1 2 3 5 6]" {
		t.Errorf("merge: %v", got)
	}
}

// Over the memory budget the ring packs older logs before it drops any
// interval, and a packed log reads back whole.
func TestRingPacksLogsBeforeDropping(t *testing.T) {
	text := bytes.Repeat([]byte("GET /index.html HTTP/1.1\r\nHost: example\r\n\r\n"), 90) // ~4 KB
	mk := func(i int) *interval {
		iv := &interval{meta: format.Interval{Index: i, FirstSeq: uint64(i*100 + 1)}}
		for k := 0; k < 100; k++ {
			iv.syscalls.append(&format.Syscall{Seq: uint64(i*100 + k + 1), Tid: 1, Nr: unix.SYS_READ,
				Args: [6]uint64{3, 0x1000, 4096}, Ret: int64(len(text)),
				Out: []format.OutBuf{{Addr: 0x1000, Data: text}}})
		}
		return iv
	}
	// Each log holds ~410 KB unpacked; the budget fits about two of them.
	r := newRing(100, 900<<10)
	for i := 0; i < 6; i++ {
		r.push(mk(i), true)
		if r.bytes > 2*r.maxBytes {
			t.Fatalf("after push %d the ring holds %d bytes, over twice its budget %d", i, r.bytes, r.maxBytes)
		}
	}
	r.settle()
	if len(r.intervals) != 6 {
		t.Fatalf("ring dropped intervals instead of packing their logs: %d left", len(r.intervals))
	}
	if r.bytes > r.maxBytes {
		t.Fatalf("ring holds %d bytes, budget %d", r.bytes, r.maxBytes)
	}
	packed := 0
	for _, iv := range r.intervals {
		if iv.packed != nil {
			packed++
		}
		calls, err := iv.view().appendTo(nil)
		for n, s := range calls {
			if s.Seq != iv.meta.FirstSeq+uint64(n) || !bytes.Equal(s.Out[0].Data, text) {
				t.Fatalf("interval %d call %d: %+v", iv.meta.Index, n, s.Seq)
			}
		}
		if err != nil || len(calls) != 100 || iv.calls() != 100 {
			t.Fatalf("interval %d: %d calls read back, %v", iv.meta.Index, len(calls), err)
		}
	}
	if packed == 0 {
		t.Fatal("no log was packed")
	}
}

// Pages of anonymous private memory that no mapping of the interval start
// covered (a heap grown by brk, a new anonymous mmap, stack growth) get zero
// originals when present; file and shared mappings, pages not present, and
// pages of mappings that existed at the start do not.
func TestNewPages(t *testing.T) {
	const pg = format.PageSize
	start := []format.Mapping{
		{Start: 0x10000, End: 0x12000, Prot: format.ProtRead | format.ProtWrite, Path: "[heap]"},
		{Start: 0x7f000, End: 0x80000, Prot: format.ProtRead | format.ProtWrite, Path: "[stack]"},
	}
	now := &pageSnapshot{
		maps: []format.Mapping{
			{Start: 0x10000, End: 0x14000, Prot: format.ProtRead | format.ProtWrite, Path: "[heap]"},
			{Start: 0x20000, End: 0x22000, Prot: format.ProtRead | format.ProtWrite},
			{Start: 0x30000, End: 0x32000, Prot: format.ProtRead, Inode: 9, Path: "/lib.so"},
			{Start: 0x40000, End: 0x42000, Prot: format.ProtRead | format.ProtWrite, Shared: true},
			{Start: 0x7d000, End: 0x80000, Prot: format.ProtRead | format.ProtWrite, Path: "[stack]"},
		},
		ents: [][]uint64{
			{proc.PMPresent, proc.PMPresent, proc.PMPresent, 0}, // grown by two pages, one touched
			{proc.PMSwapped, proc.PMPresent},                    // a new anonymous mapping
			{proc.PMPresent, proc.PMPresent},                    // a new file mapping
			{proc.PMPresent, proc.PMPresent},                    // new shared memory
			{0, proc.PMPresent, proc.PMPresent},                 // the stack grew by two pages
		},
	}
	got := newPages(start, now)
	want := []uint64{0x12000, 0x20000, 0x20000 + pg, 0x7e000}
	if fmt.Sprintf("%x", got) != fmt.Sprintf("%x", want) {
		t.Errorf("new pages %x, want %x", got, want)
	}
}

// readLog is an interval whose log holds n reads of 32 KiB from fill.
func readLog(index, n int, fill func(i int) []byte) *interval {
	iv := &interval{meta: format.Interval{Index: index}}
	for i := 0; i < n; i++ {
		iv.syscalls.append(&format.Syscall{Nr: 0, Args: [6]uint64{3, 0x10000, 32 << 10}, Ret: 32 << 10,
			Out: []format.OutBuf{{Addr: 0x10000, Data: fill(i)}}})
	}
	return iv
}

// A log of reads of random bytes is not packed (it would not shrink); one
// of text is. And the partial interval a dump closes does not push the ring
// over its budget into dropping the interval before it, which the next
// boundary's push then does.
func TestRingIncompressibleLogAndDumpPush(t *testing.T) {
	random := func(i int) []byte {
		b := make([]byte, 32<<10)
		rand.New(rand.NewSource(int64(i))).Read(b)
		return b
	}
	text := func(i int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("line %d of a log file\n", i)), 32<<10/16)[:32<<10]
	}
	if !incompressible(readLog(1, 40, random)) {
		t.Error("a log of random reads counts as compressible")
	}
	if incompressible(readLog(1, 40, text)) {
		t.Error("a log of text reads counts as incompressible")
	}
	r := newRing(8, 2<<20)
	r.push(readLog(1, 40, random), true) // 1.25 MiB
	r.push(readLog(2, 40, random), true) // over 2 MiB: interval 1 goes, unpacked
	if len(r.intervals) != 1 || r.intervals[0].meta.Index != 2 || r.intervals[0].packed != nil {
		t.Fatalf("after the second push: %d intervals, first %d, packed %v", len(r.intervals), r.intervals[0].meta.Index, r.intervals[0].packed != nil)
	}
	r.push(readLog(3, 1, random), false) // a dump's partial interval
	if len(r.intervals) != 2 {
		t.Fatalf("the dump's push left %d intervals, want 2", len(r.intervals))
	}
	r.push(readLog(4, 40, random), true)
	if len(r.intervals) != 2 || r.intervals[0].meta.Index != 3 {
		t.Fatalf("the next push left %d intervals, first %d; want 3 and 4", len(r.intervals), r.intervals[0].meta.Index)
	}
}

// An interval whose log alone is over the budget but compresses (a loop
// reading a small text file at full speed) is packed, not made the reason
// to drop every interval before it; and the packing leaves push at once.
func TestRingPacksIntervalOverBudget(t *testing.T) {
	text := func(i int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("line %d of a config file\n", i%7)), 32<<10/16)[:32<<10]
	}
	r := newRing(8, 2<<20)
	r.push(readLog(1, 24, text), true)  // 0.75 MiB
	r.push(readLog(2, 24, text), true)  // 1.5 MiB
	r.push(readLog(3, 160, text), true) // 5 MiB: over the budget by itself
	if r.busy == nil && r.memDropped == 0 && r.bytes > r.maxBytes {
		t.Fatal("over budget with no pack under way and nothing dropped")
	}
	r.settle()
	if r.memDropped != 0 || len(r.intervals) != 3 {
		t.Fatalf("%d intervals dropped for memory, %d left; want none dropped", r.memDropped, len(r.intervals))
	}
	if r.bytes > r.maxBytes {
		t.Fatalf("ring holds %d bytes, budget %d", r.bytes, r.maxBytes)
	}
	for _, iv := range r.intervals {
		calls, err := iv.view().appendTo(nil)
		for n, s := range calls {
			if !bytes.Equal(s.Out[0].Data, text(n)) {
				t.Fatalf("interval %d call %d: wrong bytes", iv.meta.Index, n)
			}
		}
		if err != nil || len(calls) != iv.calls() {
			t.Fatalf("interval %d: %d calls read back of %d, %v", iv.meta.Index, len(calls), iv.calls(), err)
		}
	}
}

// A call log gives back every call as it was appended, whatever its
// arguments, return address and the sizes of its outputs (none, small ones
// sharing chunks, ones over a chunk with a chunk of their own), after the
// callers' buffers were reused, by index, by each and copied out; and it
// counts the memory it holds.
func TestCallLogRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewSource(2))
	var want []format.Syscall
	var l callLog
	var seq uint64
	buf := make([]byte, 600<<10) // reused for every call's outputs, as the reader's
	for i := 0; i < 3*4096+17; i++ {
		seq += uint64(1 + rnd.Intn(2)*rnd.Intn(5)) // mostly the next one
		rec := format.Syscall{Seq: seq, Tid: 1 + rnd.Intn(3), Nr: rnd.Intn(450) - 1, Ret: rnd.Int63() - 1<<62, Rip: rnd.Uint64() % 20}
		if rnd.Intn(4) == 0 {
			rec.Tid = -rnd.Intn(3) // as odd as it gets
		}
		for k := range rec.Args {
			switch rnd.Intn(3) {
			case 0:
				rec.Args[k] = rnd.Uint64()
			case 1:
				rec.Args[k] = uint64(rnd.Intn(300))
			}
		}
		var own []format.OutBuf
		off := 0
		for range rnd.Intn(4) {
			n := []int{0, 1, 8, 4000, logChunk + 1, 90 << 10}[rnd.Intn(6)]
			if rnd.Intn(8) != 0 {
				n %= 5000 // big ones are rare
			}
			if off+n > len(buf) {
				break
			}
			d := buf[off : off+n : off+n]
			off += n
			rnd.Read(d)
			addr := rnd.Uint64()
			if rnd.Intn(2) == 0 {
				addr = rec.Args[rnd.Intn(6)] + uint64(rnd.Intn(64)) - 32 // near an argument
			}
			rec.Out = append(rec.Out, format.OutBuf{Addr: addr, Data: d})
			own = append(own, format.OutBuf{Addr: addr, Data: bytes.Clone(d)})
		}
		l.append(&rec)
		rnd.Read(buf[:off]) // what the reader's next record puts there
		rec.Out = own
		want = append(want, rec)
	}
	if l.len() != len(want) {
		t.Fatalf("len %d, want %d", l.len(), len(want))
	}
	var each []format.Syscall
	for c := range l.each() {
		// Each call as it comes: the next one overwrites the variable.
		each = append(each, *c)
		each[len(each)-1].Out = slices.Clone(c.Out)
	}
	copied := l.appendTo(make([]format.Syscall, 1)) // after what dst holds
	if len(copied) != len(want)+1 || len(each) != len(want) {
		t.Fatalf("appendTo gave %d calls, each %d, want %d", len(copied)-1, len(each), len(want))
	}
	// Packed (the ring short of memory) and unpacked, the same calls.
	u, err := l.pack().unpack()
	if err != nil {
		t.Fatal(err)
	}
	unpacked := u.appendTo(nil)
	if len(unpacked) != len(want) {
		t.Fatalf("the unpacked log has %d calls, want %d", len(unpacked), len(want))
	}
	for i := range want {
		for _, got := range []*format.Syscall{&each[i], l.at(i), &copied[i+1], &unpacked[i]} {
			w := want[i]
			if got.Seq != w.Seq || got.Tid != w.Tid || got.Nr != w.Nr || got.Args != w.Args || got.Ret != w.Ret || got.Rip != w.Rip || len(got.Out) != len(w.Out) {
				t.Fatalf("call %d: got %+v, want %+v", i, *got, w)
			}
			for k := range w.Out {
				if got.Out[k].Addr != w.Out[k].Addr || !bytes.Equal(got.Out[k].Data, w.Out[k].Data) {
					t.Fatalf("call %d output %d differs", i, k)
				}
			}
		}
	}
	var outBytes int64
	for _, w := range want {
		for _, o := range w.Out {
			outBytes += int64(len(o.Data))
		}
	}
	if l.bytes < outBytes+int64(len(want))*4 {
		t.Fatalf("the log counts %d bytes, less than its calls and outputs hold", l.bytes)
	}
}

// TestCallLogSharesRepeatedOutputs: an output with the bytes of the last
// output of its kind (number, first argument, position) is not copied
// again, whatever other calls come in between, and every call still reads
// back its own bytes when the content changes.
func TestCallLogSharesRepeatedOutputs(t *testing.T) {
	var l callLog
	zeros := make([]byte, 512)
	text := bytes.Repeat([]byte("a line of text\n"), 100)
	buf := make([]byte, 1500)
	var want [][]byte
	for i := range 20000 {
		data := zeros
		fd := uint64(3)
		switch {
		case i%2 == 1:
			data, fd = text, 5
		case i%1000 == 0:
			data = bytes.Repeat([]byte{byte(i / 1000)}, 512) // a change
		}
		copy(buf, data) // the reader's buffer, scribbled over after each call
		l.append(&format.Syscall{Seq: uint64(i + 1), Nr: 0, Args: [6]uint64{fd, 0x5000, 4096}, Ret: int64(len(data)),
			Out: []format.OutBuf{{Addr: 0x5000, Data: buf[:len(data)]}}})
		rand.Read(buf)
		want = append(want, data)
	}
	for i := range want {
		if got := l.at(i).Out[0].Data; !bytes.Equal(got, want[i]) {
			t.Fatalf("call %d: %d bytes differ from the %d logged", i, len(got), len(want[i]))
		}
	}
	// 20,000 outputs of 512 and 1,500 bytes: 20 MB copied. Shared: one
	// slab and the blocks of records and outputs (2.5 MB).
	if l.bytes > 4<<20 {
		t.Errorf("log holds %d bytes, want under 4 MiB", l.bytes)
	}
	// Packed, the log holds a few times less and reads back the same
	// (repeats refer to other chunks); a damaged chunk is an error.
	p := l.pack()
	if p.bytes*4 > l.bytes {
		t.Errorf("packed, the log holds %d bytes of %d", p.bytes, l.bytes)
	}
	u, err := p.unpack()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got := u.at(i).Out[0].Data; !bytes.Equal(got, want[i]) {
			t.Fatalf("unpacked, call %d: %d bytes differ from the %d logged", i, len(got), len(want[i]))
		}
	}
	p.log.chunks[0] = p.log.chunks[0][:len(p.log.chunks[0])/2]
	if _, err := p.unpack(); err == nil {
		t.Error("a packed log with a truncated chunk unpacked")
	}
}

// A page rewritten in a few words every interval is stored as deltas
// against its previous original, read back exactly, and its bases stay
// while a delta refers to them; every byte is accounted for and released.
func TestRingDeltaOriginals(t *testing.T) {
	r := newRing(4, 1<<30)
	rng := rand.New(rand.NewSource(7))
	cur := noise(1)
	big := noise(2)
	held := map[format.Hash][]byte{}
	for i := 0; i < 30; i++ {
		r.beginOriginals(3)
		iv := &interval{meta: format.Interval{Index: i}}
		orig := slices.Clone(cur)
		r.addPage(iv, 0x1000, orig)
		held[r.key(orig)] = orig
		if i%5 != 0 {
			// An original the previous boundary did not save: no base.
			r.addPage(iv, 0x9000, noise(int64(100+i)))
		}
		b := slices.Clone(big)
		r.addPage(iv, 0x2000, b)
		held[r.key(b)] = b
		r.push(iv, true)
		// The interval's writes: a few words of one page, all of the other.
		for k := 0; k < 3; k++ {
			cur[rng.Intn(format.PageSize)] ^= 0x5a
		}
		big = noise(int64(1000 + i))
	}
	deltas, depth := 0, 0
	for _, iv := range r.intervals {
		for _, p := range iv.meta.Written {
			got, err := r.page(p.Hash)
			if err != nil || !bytes.Equal(got, held[p.Hash]) && held[p.Hash] != nil || ringName(r, got) != p.Hash {
				t.Fatalf("interval %d page %#x: %v", iv.meta.Index, p.Addr, err)
			}
			if b := r.pages[p.Hash]; b.base != nil {
				deltas++
				depth = max(depth, b.depth)
				if p.Addr != 0x1000 {
					t.Fatalf("page %#x, rewritten whole, is a delta", p.Addr)
				}
				if len(b.data) > 64 {
					t.Fatalf("a delta of 3 changed bytes takes %d bytes", len(b.data))
				}
			}
		}
	}
	// Interval 27 starts a new chain: 26 was the maxDeltaDepth-th delta.
	if deltas != 3 || depth != maxDeltaDepth {
		t.Fatalf("%d of the last 4 originals of the rewritten page are deltas (depth up to %d), want 3 (up to %d)", deltas, depth, maxDeltaDepth)
	}
	var sum int64
	for _, b := range r.pages {
		sum += int64(len(b.data))
		if b.refs <= 0 {
			t.Fatalf("a blob with %d references is stored", b.refs)
		}
	}
	if sum != r.bytes-r.logBytes() {
		t.Fatalf("the ring counts %d bytes of pages, its blobs hold %d", r.bytes-r.logBytes(), sum)
	}
	for len(r.intervals) > 0 {
		r.drop()
	}
	if len(r.pages) != 0 || r.bytes != 0 {
		t.Fatalf("after every interval is dropped: %d blobs, %d bytes", len(r.pages), r.bytes)
	}
}

func (r *ring) logBytes() int64 {
	var n int64
	for _, iv := range r.intervals {
		n += iv.logBytes
	}
	return n
}

// A dump renames the originals it keeps with the file's names
// (format.HashPage), in lists of its own: the ring, which goes on recording
// after a dump request, keeps its names.
func TestFileNamesLeaveTheRingAlone(t *testing.T) {
	r := newRing(4, 1<<30)
	iv := &interval{meta: format.Interval{Index: 0}}
	pages := [][]byte{noise(1), page(0), noise(2)}
	for i, p := range pages {
		r.addPage(iv, uint64(i+1)<<12, p)
	}
	r.push(iv, true)
	saved := map[format.Hash]*blob{}
	for _, p := range iv.meta.Written {
		if b := r.pages[p.Hash]; b != nil {
			saved[p.Hash] = b
		}
	}
	c := &format.Checkpoint{Intervals: []format.Interval{iv.meta}} // shares the ring's list
	src := &liveSource{saved: saved, store: format.NewMemStore()}
	if err := src.fileNames(c); err != nil {
		t.Fatal(err)
	}
	for i, p := range pages {
		if got := c.Intervals[0].Written[i].Hash; got != format.HashPage(p) {
			t.Fatalf("page %d named %x in the checkpoint, want %x", i, got, format.HashPage(p))
		}
		if got := iv.meta.Written[i].Hash; got != ringName(r, p) {
			t.Fatalf("page %d renamed in the ring too: %x", i, got)
		}
		if got, err := src.Page(format.HashPage(p)); err != nil || !bytes.Equal(got, p) {
			t.Fatalf("page %d not served under its file name: %v", i, err)
		}
	}
}

// The buffers originals are read into are reused, but never one whose pages
// a delta source still aliases: each boundary's buffer is overwritten whole
// before its pages are stored, as a read does, and every page reads back
// exactly. Two buffers take turns: the previous boundary's, which its delta
// sources alias, and the one of the boundary before, which none does.
func TestOriginalsBufReuse(t *testing.T) {
	r := newRing(8, 1<<30)
	rng := rand.New(rand.NewSource(3))
	var pages [][]byte
	for k := range 8 {
		pages = append(pages, noise(int64(k+1)))
	}
	held := map[format.Hash][]byte{}
	seen := map[*byte]int{}
	for i := 0; i < 12; i++ {
		n := len(pages) - 1 + (i/2)%2 // a page more or less every other time
		r.beginOriginals(n)
		buf := r.originalsBuf(n)
		for k := range buf {
			buf[k] = 0xee
		}
		for k, p := range pages[:n] {
			copy(buf[k*format.PageSize:], p)
		}
		seen[&buf[0]]++
		iv := &interval{meta: format.Interval{Index: i}}
		for k, p := range pages[:n] {
			r.addPage(iv, uint64(k+1)<<12, buf[k*format.PageSize:(k+1)*format.PageSize])
			held[r.key(p)] = slices.Clone(p)
		}
		r.push(iv, true)
		for _, p := range pages { // a few words rewritten: stored as deltas
			p[rng.Intn(format.PageSize)] ^= 0x5a
		}
	}
	deltas := 0
	for _, iv := range r.intervals {
		for _, p := range iv.meta.Written {
			got, err := r.page(p.Hash)
			if err != nil || !bytes.Equal(got, held[p.Hash]) {
				t.Fatalf("interval %d page %#x does not read back: %v", iv.meta.Index, p.Addr, err)
			}
			if r.pages[p.Hash].base != nil {
				deltas++
			}
		}
	}
	if deltas == 0 {
		t.Fatal("no page was stored as a delta: the test does not reach the buffers the deltas alias")
	}
	if len(seen) != 2 {
		t.Fatalf("%d buffers used over 12 boundaries, want 2", len(seen))
	}
}
