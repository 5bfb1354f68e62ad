package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the seed files in testdata/")

func TestRoundTrip(t *testing.T) {
	c, store := richCheckpoint(1, 5, 1500, 4000)
	b := encode(t, c, store)
	f, err := decodeBytes(b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	defer f.Close()
	if err := sameCheckpoint(c, f.Checkpoint); err != nil {
		t.Fatal(err)
	}
	distinct := map[Hash]bool{}
	zero := 0
	for _, h := range referenced(c) {
		if h == ZeroHash {
			zero++
		} else {
			distinct[h] = true
		}
		want, _ := store.Page(h)
		got, err := f.Page(h)
		if err != nil {
			t.Fatalf("Page(%x): %v", h, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Page(%x): content differs", h)
		}
	}
	if zero == 0 || len(distinct) < 500 {
		t.Fatalf("test model too poor: %d zero refs, %d distinct pages", zero, len(distinct))
	}
	if refs := len(referenced(c)); refs <= len(distinct)+zero {
		t.Fatalf("test model has no duplicate pages (%d refs, %d distinct)", refs, len(distinct))
	}
	st := f.Stats()
	if st.StoredPages != len(distinct) {
		t.Errorf("Stats.StoredPages = %d, want %d (each distinct non-zero page once)", st.StoredPages, len(distinct))
	}
	if st.PagesRaw != int64(len(distinct))*PageSize {
		t.Errorf("Stats.PagesRaw = %d, want %d", st.PagesRaw, len(distinct)*PageSize)
	}
	if st.PagesCompressed >= st.PagesRaw {
		t.Errorf("pages not compressed: %d of %d bytes", st.PagesCompressed, st.PagesRaw)
	}
	if st.FileSize != int64(len(b)) {
		t.Errorf("Stats.FileSize = %d, want %d", st.FileSize, len(b))
	}
	var sum int64 = fileHeaderSize + trailerSize
	names := []string{}
	for _, s := range st.Sections {
		sum += sectionHeaderSize + s.Size
		names = append(names, s.Name)
		if s.Name == "SYSCL" && s.Raw <= s.Size {
			t.Errorf("SYSCL not compressed: %d bytes for %d raw", s.Size, s.Raw)
		}
	}
	if sum != int64(len(b)) {
		t.Errorf("sections add up to %d bytes, file has %d", sum, len(b))
	}
	if got := strings.Join(names, " "); got != "HEADR INTVL FINAL SYSCL SIGNL ENDST PGIDX PAGES DIRCT" {
		t.Errorf("sections %s", got)
	}
	if _, err := f.Page(HashPage([]byte("not a page"))); !errors.Is(err, ErrNoPage) {
		t.Errorf("Page(unknown) = %v, want ErrNoPage", err)
	}
	if p, err := f.Page(ZeroHash); err != nil || !bytes.Equal(p, make([]byte, PageSize)) {
		t.Errorf("Page(ZeroHash) = %v", err)
	}
	t.Logf("%d bytes for %d distinct pages and %d syscalls", len(b), len(distinct), len(c.Syscalls))
}

func TestEmptyCheckpoint(t *testing.T) {
	c := &Checkpoint{}
	f, err := decodeBytes(encode(t, c, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := sameCheckpoint(c, f.Checkpoint); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.StoredPages != 0 || st.Blocks != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEncodeDeterministic: the same model gives the same bytes, whatever the
// map order inside the writer.
func TestEncodeDeterministic(t *testing.T) {
	c, store := richCheckpoint(3, 2, 100, 50)
	if !bytes.Equal(encode(t, c, store), encode(t, c, store)) {
		t.Fatal("two encodings differ")
	}
}

func TestWriteOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tp-4242.tpc")
	c, store := richCheckpoint(2, 3, 300, 200)
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, c, store); err != nil {
		t.Fatalf("Write: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	onlyFile(t, dir, "tp-4242.tpc")
	f, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := sameCheckpoint(c, f.Checkpoint); err != nil {
		t.Fatal(err)
	}
	for _, h := range referenced(c) {
		if _, err := f.Page(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Page(referenced(c)[0]); err == nil {
		t.Error("Page after Close succeeded")
	}
	// Relative path, in the working directory.
	t.Chdir(dir)
	if err := Write("rel.tpc", c, store); err != nil {
		t.Fatalf("Write relative: %v", err)
	}
	if f, err := Open("rel.tpc"); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
}

// onlyFile fails unless dir holds exactly the named files (no temporaries).
func onlyFile(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("directory holds %q, want %q", got, names)
	}
}

type failingSource struct {
	PageSource
	after int
}

func (s *failingSource) Page(h Hash) ([]byte, error) {
	if s.after--; s.after < 0 {
		return nil, errors.New("recorder ring lost the page")
	}
	return s.PageSource.Page(h)
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	c, store := richCheckpoint(2, 3, 300, 200)
	path := filepath.Join(dir, "cp.tpc")
	if err := os.WriteFile(path, []byte("previous"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Write(path, c, &failingSource{store, 100})
	if err == nil || !strings.Contains(err.Error(), "recorder ring lost the page") {
		t.Fatalf("Write with a failing source: %v", err)
	}
	onlyFile(t, dir, "cp.tpc")
	if b, _ := os.ReadFile(path); string(b) != "previous" {
		t.Fatalf("existing file changed to %q", b)
	}
	// A directory that does not exist.
	if err := Write(filepath.Join(dir, "nope", "cp.tpc"), c, store); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Write into a missing directory: %v", err)
	}
	// A model the reader would refuse is not written.
	bad := *c
	bad.Syscalls = append([]Syscall(nil), c.Syscalls...)
	bad.Syscalls[1].Seq = bad.Syscalls[0].Seq
	if err := Write(path, &bad, store); err == nil || !strings.Contains(err.Error(), "sequence number") {
		t.Fatalf("Write with unsorted syscalls: %v", err)
	}
	onlyFile(t, dir, "cp.tpc")
}

// TestWriteDiskFull writes into a tiny tmpfs: the error must wrap ENOSPC and
// nothing may be left behind.
func TestWriteDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to mount a small tmpfs, and CI runs as root")
		}
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, 0)
	c, store := richCheckpoint(5, 2, 200, 100) // ~400 KiB of noise pages
	err := Write(filepath.Join(dir, "cp.tpc"), c, store)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write on a full disk: %v, want ENOSPC", err)
	}
	if !strings.Contains(err.Error(), "no space left") {
		t.Errorf("error does not say the disk is full: %v", err)
	}
	onlyFile(t, dir)
}

func TestEncodeRejects(t *testing.T) {
	c, store := richCheckpoint(4, 2, 50, 20)
	cases := []struct {
		name string
		mod  func(c *Checkpoint)
		src  PageSource
		want string
	}{
		{"unaligned", func(c *Checkpoint) { c.Final[0].Addr++ }, store, "not page-aligned"},
		{"duplicate", func(c *Checkpoint) { c.Final = append(c.Final, c.Final[0]) }, store, "listed twice"},
		{"seq zero", func(c *Checkpoint) { c.Syscalls[0].Seq = 0 }, store, "sequence number 0"},
		{"signals", func(c *Checkpoint) { c.Signals[0].Seq = 1 << 40 }, store, "signal 1"},
		{"intervals", func(c *Checkpoint) { c.Intervals[1].Index = c.Intervals[0].Index }, store, "index"},
		{"maps", func(c *Checkpoint) { c.Intervals[0].Maps[0].End = c.Intervals[0].Maps[0].Start }, store, "mapping"},
		{"missing page", func(c *Checkpoint) { c.Final[0].Hash = HashPage([]byte{1}) }, store, "page not in checkpoint"},
		{"no source", func(c *Checkpoint) {}, nil, "no page source"},
		{"wrong content", func(c *Checkpoint) {}, lyingSource{store}, "hashes to"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := deepCopy(t, c, store)
			tc.mod(m)
			err := Encode(&bytes.Buffer{}, m, tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Encode: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

type lyingSource struct{ PageSource }

func (s lyingSource) Page(h Hash) ([]byte, error) {
	p, err := s.PageSource.Page(h)
	p = append([]byte(nil), p...)
	p[100] ^= 1
	return p, err
}

// deepCopy gives an independent copy of c through an encoding round trip.
func deepCopy(t testing.TB, c *Checkpoint, store PageSource) *Checkpoint {
	t.Helper()
	f, err := decodeBytes(encode(t, c, store))
	if err != nil {
		t.Fatal(err)
	}
	return f.Checkpoint
}

// TestSyscallLogExtremes: the version 2 log stores differences; values at
// the ends of their ranges, differences that wrap, repeated and empty records
// must come back exactly.
func TestSyscallLogExtremes(t *testing.T) {
	c := &Checkpoint{}
	seq := uint64(1)
	add := func(s Syscall) {
		s.Seq = seq
		seq += 1 + uint64(len(c.Syscalls)%3)*(1<<40)
		c.Syscalls = append(c.Syscalls, s)
	}
	top := ^uint64(0)
	add(Syscall{Tid: math.MaxInt64, Nr: -1, Args: [6]uint64{top, 0, top, 1, top >> 1, 1 << 63}, Ret: math.MinInt64, Rip: top})
	add(Syscall{Tid: math.MinInt64, Nr: math.MaxInt64, Ret: math.MaxInt64})
	add(Syscall{Tid: 1, Nr: -1, Args: [6]uint64{0, top, 0, 0, 0, 0}, Rip: 0,
		Out: []OutBuf{{Addr: top, Data: []byte{1}}, {Addr: 0, Data: nil}, {Addr: 1 << 63, Data: []byte("x")}}})
	add(Syscall{Tid: 1, Nr: -1, Args: [6]uint64{0, top, 0, 0, 0, 0},
		Out: []OutBuf{{Addr: 0, Data: []byte{2, 3}}}})
	add(Syscall{Tid: 1, Nr: -1, Args: [6]uint64{0, top, 0, 0, 0, 0}})
	add(Syscall{Tid: 1, Nr: 0})
	b := encode(t, c, nil)
	f, err := decodeBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := sameCheckpoint(c, f.Checkpoint); err != nil {
		t.Fatal(err)
	}
}

// A SYSCL payload decodes to the calls it encoded; a truncated one does not.
func TestSyscallPayloadRoundTrip(t *testing.T) {
	c, _ := richCheckpoint(3, 2, 200, 10)
	b := packSyscalls(c.Syscalls)
	got, err := unpackSyscalls(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c.Syscalls) {
		t.Fatalf("unpacked calls differ")
	}
	if _, err := unpackSyscalls(b[:len(b)/2]); err == nil {
		t.Error("a truncated packed log decoded")
	}
}

// Time values (8- and 16-byte outputs following one of the same length)
// are stored as word differences: extreme differences round-trip, a log
// that ends on such a record (fewer bytes left than the output's length)
// decodes, and a busy server's clock_gettime costs 3 bytes of data before
// compression, not 16 (the rest of its record is 9 or 10).
func TestSyscallLogTimeDeltas(t *testing.T) {
	top := ^uint64(0)
	ts := func(sec, nsec uint64) []byte {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, sec)
		binary.LittleEndian.PutUint64(b[8:], nsec)
		return b
	}
	var calls []Syscall
	add := func(nr int, out ...[]byte) {
		s := Syscall{Seq: uint64(len(calls) + 1), Tid: 7, Nr: nr}
		for _, o := range out {
			s.Out = append(s.Out, OutBuf{Addr: 0x7ffc_0000_1000, Data: o})
		}
		calls = append(calls, s)
	}
	add(228, ts(top, 0))
	add(228, ts(0, top))                // differences of 2^64-1 and 1
	add(228, ts(5, 6)[:8])              // another length: stored as is
	add(228, ts(7, 8)[:8])              // then 8 bytes after 8 bytes
	add(96, ts(1, 2), ts(3, 4)[:12])    // the second output is not 8 or 16 bytes
	add(96, ts(1, 3), ts(3, 5)[:12])    //
	add(96, ts(9, 9))                   // fewer outputs than the previous
	add(96, nil, ts(9, 9))              // output 1 without a predecessor of its length
	for i := uint64(0); i < 1000; i++ { // a clock read every 3 µs
		add(228, ts(24856, 126_000_000+3000*i+i%7))
	}
	got, err := unpackSyscalls(packSyscalls(calls))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, calls) {
		for i := range calls {
			if !reflect.DeepEqual(got[i], calls[i]) {
				t.Fatalf("call %d: got %+v, want %+v", i, got[i], calls[i])
			}
		}
	}
	if per := float64(len(encodeSyscallsRaw(len(calls), slicePointers(calls)))) / float64(len(calls)); per > 13 {
		t.Errorf("%.1f bytes per call before compression, want at most 13", per)
	}
}

// TestSyscallLogRepeatedOutputs checks the repeated outputs (versions 5
// and 6): a read that returns the bytes the last read of its descriptor
// that returned any returned stores them once, whichever calls come in
// between, also when a read to the end of the file (nothing) came in
// between (version 6); a record that repeats nothing (another length,
// other bytes, an empty output) stores its bytes; and a repeat flag without
// an output to repeat is refused.
func TestSyscallLogRepeatedOutputs(t *testing.T) {
	block := bytes.Repeat([]byte{0}, 512)
	text := bytes.Repeat([]byte("a line of text\n"), 100)
	var calls []Syscall
	add := func(nr int, fd uint64, out ...[]byte) {
		s := Syscall{Seq: uint64(len(calls) + 1), Tid: 7, Nr: nr, Args: [6]uint64{fd, 0x5000}}
		for _, o := range out {
			s.Out = append(s.Out, OutBuf{Addr: 0x5000, Data: o})
		}
		calls = append(calls, s)
	}
	for i := range 1000 {
		add(0, 3, block) // dd reading /dev/zero
		add(1, 4)
		add(0, 5, text) // a file read over and over, between the others
		add(0, 6, text) // a file read to its end over and over
		add(0, 6, nil)
		if i%100 == 0 {
			add(0, 3, block[:100])                     // another length
			add(0, 3, append([]byte{1}, block[1:]...)) // other bytes
			add(0, 3, block, text)                     // a second output
			add(0, 3, nil)                             // empty
		}
	}
	got, err := unpackSyscalls(packSyscalls(calls))
	if err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if !reflect.DeepEqual(got[i], calls[i]) {
			t.Fatalf("call %d: got %#v, want %#v", i, got[i], calls[i])
		}
	}
	// The bytes stored: the first block and texts, the 10 changed blocks,
	// the first of their text outputs, and the 6,040 records' heads: about
	// 59 KB. Without repeats: 3.5 MB; with version 5's, which repeat the
	// compared record (the read that returned nothing), 1.5 MB more.
	raw := encodeSyscallsRaw(len(calls), slicePointers(calls))
	if len(raw) > 80_000 {
		t.Errorf("%d bytes before compression, want under 80,000", len(raw))
	}

	// A repeat of an output no earlier record had.
	one := []Syscall{{Seq: 1, Tid: 7, Nr: 0, Args: [6]uint64{3}, Out: []OutBuf{{Addr: 0x5000, Data: block[:8]}}}}
	raw = encodeSyscallsRaw(1, slicePointers(one))
	// The outputs stream is the address difference 0x5000 (svarint, 3 bytes),
	// then the length 8<<1; set its repeat bit.
	i := bytes.Index(raw, []byte{0x80, 0xc0, 0x02, 16})
	if i < 0 {
		t.Fatalf("outputs stream not found in % x", raw)
	}
	raw[i+3] |= 1
	d := &dec{b: raw, base: -1, sec: "SYSCL"}
	decodeSyscalls(d, VersionMajor)
	if d.fail == nil || !strings.Contains(d.fail.Error(), "repeats the last one of its number and descriptor, which had 0 bytes") {
		t.Errorf("a repeat without a compared output: got %v", d.fail)
	}
}

// A payload given as pieces (the syscall log's streams and blocks) packs to
// the same bytes as the pieces joined, whatever their sizes: chunks within
// one piece, chunks gathered from many, a piece longer than a chunk, and
// incompressible chunks stored as they are; both codecs.
func TestPackPieces(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var p pieces
	for p.n < 3*packChunk+packChunk/3 {
		var b []byte
		switch r.IntN(4) {
		case 0:
			b = make([]byte, packChunk+r.IntN(packChunk)) // longer than a chunk
		case 1:
			b = make([]byte, 1+r.IntN(64))
		default:
			b = make([]byte, 1+r.IntN(200<<10))
		}
		if r.IntN(3) == 0 {
			for i := range b {
				b[i] = byte(r.Uint32()) // incompressible
			}
		} else {
			for i := range b {
				b[i] = byte(i / 97)
			}
		}
		p.add(b)
		p.add(nil) // empty pieces are left out
	}
	raw := p.join()
	if len(raw) != p.n {
		t.Fatalf("joined %d bytes of %d", len(raw), p.n)
	}
	for _, c := range []*codec{{}, newWriterCodec()} {
		var want, got enc
		pack(&want, c, raw)
		packPieces(&got, c, p)
		if !bytes.Equal(got.b, want.b) {
			t.Fatalf("zstd %v: packed from pieces: %d bytes, from the joined bytes: %d, not the same", c.zstd, len(got.b), len(want.b))
		}
		if back := unpack(&dec{b: got.b, sec: "TEST"}, c); !bytes.Equal(back, raw) {
			t.Fatalf("zstd %v: unpacked %d bytes, not the %d packed", c.zstd, len(back), len(raw))
		}
	}
}
