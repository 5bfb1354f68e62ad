package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

// mustFormatError fails unless err is a *FormatError that matches ErrFormat.
func mustFormatError(t *testing.T, err error, what string) *FormatError {
	t.Helper()
	var fe *FormatError
	if err == nil {
		t.Fatalf("%s: decoded without error", what)
	}
	if !errors.As(err, &fe) || !errors.Is(err, ErrFormat) {
		t.Fatalf("%s: error %T %v is not a FormatError", what, err, err)
	}
	return fe
}

func corruptionSample(t *testing.T) []byte {
	c, store := richCheckpoint(9, 3, 120, 300)
	return encode(t, c, store)
}

func TestTruncated(t *testing.T) {
	b := corruptionSample(t)
	step := 1
	for n := 0; n < len(b); n += step {
		_, err := decodeBytes(b[:n])
		mustFormatError(t, err, "truncated")
		switch {
		case n < 400 || n > len(b)-400:
			step = 1
		default:
			step = 61
		}
	}
	t.Logf("%d-byte file", len(b))
}

func TestBitFlips(t *testing.T) {
	b := corruptionSample(t)
	mod := make([]byte, len(b))
	for off := 0; off < len(b); off++ {
		if off > 300 && off < len(b)-600 && off%29 != 0 {
			continue
		}
		copy(mod, b)
		mod[off] ^= 1 << (off % 8)
		f, err := decodeBytes(mod)
		mustFormatError(t, err, "bit flip")
		if f != nil {
			t.Fatalf("flip at %d: File and error", off)
		}
	}
}

// TestCorruptPageContent damages a stored page in a way the section
// CRC cannot see (the file is re-framed with fresh CRCs): Page must notice.
func TestCorruptPageContent(t *testing.T) {
	c, store := richCheckpoint(11, 1, 1, 0)
	c.Intervals[0].Written = nil
	// Noise pages do not compress, so their block is stored as is and a byte
	// can be changed in place.
	r := uint64(1)
	var refs []PageRef
	for i := 0; i < 3; i++ {
		p := make([]byte, PageSize)
		for j := range p {
			r = r*6364136223846793005 + 1442695040888963407
			p[j] = byte(r >> 56)
		}
		refs = append(refs, PageRef{Addr: uint64(i) * PageSize, Hash: store.Put(p)})
	}
	c.Final = refs
	secs, err := buildSections(c, store)
	if err != nil {
		t.Fatal(err)
	}
	pages := secs[len(secs)-1].payload
	if le32(pages[4+8:]) != le32(pages[4+12:]) {
		t.Fatal("block was compressed; test needs a stored block")
	}
	pages[len(pages)-len(refs)*8-5] ^= 0x40 // in the last page, before the block's list of addresses
	var buf bytes.Buffer
	if err := writeSections(&buf, secs); err != nil {
		t.Fatal(err)
	}
	f, err := decodeBytes(buf.Bytes())
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	var bad int
	for _, p := range refs {
		if _, err := f.Page(p.Hash); err != nil {
			fe := mustFormatError(t, err, "corrupt page")
			if fe.Section != "PAGES" || !strings.Contains(fe.Msg, "corrupt") {
				t.Errorf("error %v", err)
			}
			bad++
		}
	}
	if bad != 1 {
		t.Fatalf("%d pages reported corrupt, want 1", bad)
	}
}

func TestForeignFiles(t *testing.T) {
	elf, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"elf":   elf[:min(len(elf), 1<<16)],
		"empty": nil,
		"text":  []byte("hello, world\nthis is not a checkpoint at all, but it is long enough\n"),
		"zeros": make([]byte, 4096),
	} {
		_, err := decodeBytes(b)
		fe := mustFormatError(t, err, name)
		if !strings.Contains(fe.Msg, "not a tprec checkpoint") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestVersionAndFlags(t *testing.T) {
	b := corruptionSample(t)
	mod := append([]byte(nil), b...)
	binary.LittleEndian.PutUint16(mod[8:], VersionMajor+1)
	_, err := decodeBytes(mod)
	if fe := mustFormatError(t, err, "next major version"); !strings.Contains(fe.Msg, fmt.Sprintf("version %d.%d is not supported", VersionMajor+1, VersionMinor)) {
		t.Errorf("next major version: %v", err)
	}
	// A version 1 header on a version 2 file: the syscall log does not
	// decode as version 1, and the reader says where.
	mod = append([]byte(nil), b...)
	binary.LittleEndian.PutUint16(mod[8:], 1)
	_, err = decodeBytes(mod)
	mustFormatError(t, err, "version 2 content under a version 1 header")
	// A flag this build does not know.
	mod = append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(mod[12:], FlagZstd|1<<7)
	_, err = decodeBytes(mod)
	if fe := mustFormatError(t, err, "flags"); !strings.Contains(fe.Msg, "features") {
		t.Errorf("flags: %v", err)
	}
}

// reframe encodes c, lets edit change the sections, and frames them with
// valid CRCs: what a buggy or hostile writer could produce.
func reframe(t *testing.T, edit func([]section) []section) []byte {
	t.Helper()
	c, store := richCheckpoint(12, 2, 30, 40)
	secs, err := buildSections(c, store)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeSections(&buf, edit(secs)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUnknownSections(t *testing.T) {
	b := reframe(t, func(s []section) []section {
		return append(s[:3], append([]section{{0x4242, []byte("from a future writer")}}, s[3:]...)...)
	})
	f, err := decodeBytes(b)
	if err != nil {
		t.Fatalf("unknown section not skipped: %v", err)
	}
	found := false
	for _, s := range f.Stats().Sections {
		found = found || s.Name == "TYPE16962"
	}
	if !found {
		t.Errorf("skipped section missing from Stats: %+v", f.Stats().Sections)
	}
	b = reframe(t, func(s []section) []section {
		return append(s, section{criticalBit | 0x4242, nil})
	})
	_, err = decodeBytes(b)
	if fe := mustFormatError(t, err, "critical section"); !strings.Contains(fe.Msg, "required") {
		t.Errorf("critical: %v", err)
	}
}

// TestHostileCounts: every count and length is checked against the bytes
// that are really there before anything is allocated.
func TestHostileCounts(t *testing.T) {
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	// packed stores raw as one chunk as is (too short to compress).
	packedRaw := func(raw []byte) []byte { return packed(&codec{}, raw) }
	cases := []struct {
		name string
		typ  uint32
		pay  []byte
		want string
	}{
		{"intervals", SecInterval, packedRaw(u32(math.MaxUint32)), "does not fit"},
		{"interval packing", SecInterval, u32(math.MaxUint32), "packed raw length"},
		{"final", SecFinal, u32(1 << 30), "does not fit"},
		{"signals", SecSignals, cat(u32(2), make([]byte, 300)), "does not fit"},
		{"packed size", SecSyscalls, cat(u64(1<<50), u32(packChunk)), "impossible"},
		{"packed chunk", SecSyscalls, cat(u64(1<<20), u32(1<<30)), "chunk size"},
		{"zstd garbage", SecSyscalls, cat(u64(8192), u32(8192), u32(100), bytes.Repeat([]byte{0xff}, 100)), "decompress"},
		{"blocks", SecPages, u32(math.MaxUint32), "does not fit"},
		{"block range", SecPages, cat(u32(1), u64(20), u32(1<<20), u32(PageSize)), "outside"},
		{"index", SecPageIdx, u32(1 << 28), "does not fit"},
		{"trailing", SecFinal, cat(u32(0), []byte{1}), "unexpected bytes"},
		{"string", SecEnd, u32(1 << 31), "does not fit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := reframe(t, func(s []section) []section {
				for i := range s {
					if s[i].typ == tc.typ {
						s[i].payload = tc.pay
					}
				}
				return s
			})
			_, err := decodeBytes(b)
			fe := mustFormatError(t, err, tc.name)
			if fe.Section != SectionName(tc.typ) || !strings.Contains(fe.Msg, tc.want) {
				t.Fatalf("%v: want section %s and %q", err, SectionName(tc.typ), tc.want)
			}
		})
	}
}

func TestMissingAndDuplicateSections(t *testing.T) {
	b := reframe(t, func(s []section) []section { return s[1:] })
	if fe := mustFormatError(t, decodeErr(b), "missing"); !strings.Contains(fe.Msg, "missing") {
		t.Errorf("%v", fe)
	}
	b = reframe(t, func(s []section) []section { return append(s, s[0]) })
	if fe := mustFormatError(t, decodeErr(b), "duplicate"); !strings.Contains(fe.Msg, "twice") {
		t.Errorf("%v", fe)
	}
	// A page reference to content the store lacks.
	b = reframe(t, func(s []section) []section {
		var e enc
		e.pageRefs([]PageRef{{Addr: 0x1000, Hash: HashPage([]byte("absent"))}})
		s[2].payload = e.b
		return s
	})
	if fe := mustFormatError(t, decodeErr(b), "dangling"); fe.Section != "FINAL" || !strings.Contains(fe.Msg, "not in the page store") {
		t.Errorf("%v", fe)
	}
}

func decodeErr(b []byte) error {
	_, err := decodeBytes(b)
	return err
}
