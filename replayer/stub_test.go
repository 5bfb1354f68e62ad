package replayer

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"

	"golang.org/x/sys/unix"
)

// A batch makes its calls in the stub, in order (the mprotect in its third
// part needs the mmap of its first), more than the scratch space holds at
// once, stops at the first call that fails with an error that names it,
// and leaves the stub's registers as they were.
func TestInjectBatch(t *testing.T) {
	needRoot(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s, err := startStub(0x1000_0000_0000, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.kill()
	mem, err := proc.OpenMem(s.pid)
	if err != nil {
		t.Fatal(err)
	}
	before, err := proc.GetRegs(s.pid)
	if err != nil {
		t.Fatal(err)
	}
	const at = 0x2000_0000_0000
	calls := []call{{"map", unix.SYS_MMAP, [6]uint64{at, 3 * pageSize, unix.PROT_READ | unix.PROT_WRITE,
		unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_FIXED_NOREPLACE, ^uint64(0), 0}}}
	n := 2*batchMax + 5
	for range n {
		calls = append(calls, call{"getpid", unix.SYS_GETPID, [6]uint64{}})
	}
	calls = append(calls, call{"guard the middle page", unix.SYS_MPROTECT, [6]uint64{at + pageSize, pageSize, unix.PROT_NONE}})
	if err := s.injectBatch(mem, calls); err != nil {
		t.Fatal(err)
	}
	maps, err := proc.ReadMaps(s.pid)
	if err != nil {
		t.Fatal(err)
	}
	var prots []uint32
	for _, m := range maps {
		if m.Start >= at && m.End <= at+3*pageSize {
			prots = append(prots, m.Prot)
		}
	}
	if rw := uint32(unix.PROT_READ | unix.PROT_WRITE); len(prots) != 3 || prots[0] != rw || prots[1] != 0 || prots[2] != rw {
		t.Errorf("the mapped pages' protections are %v, want read-write, none, read-write", prots)
	}

	// A call that fails ends the batch there.
	calls = []call{
		{"getpid", unix.SYS_GETPID, [6]uint64{}},
		{"unmap an unaligned address", unix.SYS_MUNMAP, [6]uint64{at + 1, pageSize}},
		{"unmap the pages", unix.SYS_MUNMAP, [6]uint64{at, 3 * pageSize}},
	}
	err = s.injectBatch(mem, calls)
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "unmap an unaligned address") {
		t.Errorf("error %v, want EINVAL naming the call", err)
	}
	if maps, err = proc.ReadMaps(s.pid); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(maps, func(m format.Mapping) bool { return m.Start == at }) {
		t.Errorf("the call after the failed one was made: nothing mapped at %#x", at)
	}
	after, err := proc.GetRegs(s.pid)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("registers after the batches:\n%+v\nbefore:\n%+v", after, before)
	}
	if err := checkMapped(s.pid, []region{{Mapping: format.Mapping{Start: at, End: at + 3*pageSize}}}); err != nil {
		t.Errorf("checkMapped: %v", err)
	}
	if err := checkMapped(s.pid, []region{{Mapping: format.Mapping{Start: at, End: at + 4*pageSize}}}); err == nil {
		t.Errorf("checkMapped found a page mapped past the mapping's end")
	}
	// The stub still injects one call at a time.
	if pid, err := s.inject(unix.SYS_GETPID); err != nil || pid != int64(s.pid) {
		t.Errorf("getpid after the batches: %d, %v", pid, err)
	}
}
