package hugepage

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestMakeGetsHugePages checks that a large slice from Make is backed by
// huge pages once written, and a small one is left alone.
func TestMakeGetsHugePages(t *testing.T) {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(b), "[never]") {
		msg := fmt.Sprintf("transparent huge pages unavailable here (%q, %v)", strings.TrimSpace(string(b)), err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s, filled := Make[uint64](64 << 20 / 8)
	if len(s) != 64<<20/8 {
		t.Fatalf("len %d", len(s))
	}
	for i := range s {
		s[i] = uint64(i)
	}
	filled()
	huge, err := anonHuge(unsafe.Pointer(&s[len(s)/2]))
	if err != nil {
		t.Fatal(err)
	}
	if huge < Size {
		t.Errorf("the 64 MiB slice has %d bytes of huge pages, want at least one", huge)
	}
	for i := range s {
		if s[i] != uint64(i) {
			t.Fatalf("word %d holds %d", i, s[i])
		}
	}

	small, filled := Make[byte](minBytes - 1)
	filled()
	if len(small) != minBytes-1 {
		t.Fatalf("len %d", len(small))
	}
}

// anonHuge returns the AnonHugePages of the mapping holding p, in bytes.
func anonHuge(p unsafe.Pointer) (int, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	a := uint64(uintptr(p))
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok { // a mapping's first line
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && l <= a && a < h
			continue
		}
		if in && f[0] == "AnonHugePages:" && len(f) > 1 {
			kb, err := strconv.Atoi(f[1])
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no mapping holds %#x", a)
}
