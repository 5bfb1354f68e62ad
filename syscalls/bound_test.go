package syscalls

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCaptureBoundCovers checks, for every call with Dyn, over every request
// code its lists declare and a spread of other arguments and return values,
// that each range Outputs returns lies inside a range the bound captures.
func TestCaptureBoundCovers(t *testing.T) {
	codes := map[int][]uint64{}
	for k := range ioctlRequests {
		codes[unix.SYS_IOCTL] = append(codes[unix.SYS_IOCTL], uint64(k))
	}
	for k := range fcntlCmds {
		codes[unix.SYS_FCNTL] = append(codes[unix.SYS_FCNTL], uint64(uint32(k)))
	}
	for k := range prctlOptions {
		codes[unix.SYS_PRCTL] = append(codes[unix.SYS_PRCTL], uint64(uint32(k)))
	}
	for k := range archPrctlCodes {
		codes[unix.SYS_ARCH_PRCTL] = append(codes[unix.SYS_ARCH_PRCTL], k)
	}
	small := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 63, 64, 65, 1000, 1024, 4096, 1 << 20, 16 << 20}
	rets := []int64{-4, -22, 0, 1, 7, 64, 4096}
	// Pointers go to a region every read can be served from.
	const base = 0x10000
	mem := newFakeMem(base, 1<<20)
	for _, d := range All() {
		if d.Dyn == nil || d.Kind == Unsupported {
			continue
		}
		bound := *d
		bound.Dyn, bound.Outs = nil, CaptureBound(d)
		keyArg := 0
		if d.Nr == unix.SYS_IOCTL || d.Nr == unix.SYS_FCNTL || d.Nr == unix.SYS_FUTEX {
			keyArg = 1
		}
		keys := codes[d.Nr]
		if keys == nil {
			keys = small
		}
		for _, key := range keys {
			for _, v := range small {
				for _, ret := range rets {
					var args [6]uint64
					for i := range args {
						args[i] = base + uint64(i)*0x1000
					}
					args[keyArg] = key
					if keyArg == 0 {
						args[1] = v
					} else {
						args[2] = v
					}
					if ok, _ := Check(d, args); !ok {
						continue
					}
					if d.Nr == unix.SYS_MINCORE && args[1] > mincoreBound*4096 {
						continue // documented limit of the bound
					}
					want, err := Outputs(d, args, ret, mem.read)
					if err != nil {
						continue // refused, and then not captured either
					}
					got, err := Outputs(&bound, args, ret, mem.read)
					if err != nil {
						t.Fatalf("%s%v = %d: bound: %v", d.Name, args, ret, err)
					}
					for _, w := range want {
						if !covered(w, got) {
							t.Fatalf("%s%v = %d: output %#x+%d outside the bound %v", d.Name, args, ret, w.Addr, w.Len, fmt.Sprint(got))
						}
					}
				}
			}
		}
	}
}

func covered(r Range, in []Range) bool {
	for _, c := range in {
		if r.Addr >= c.Addr && r.Addr+uint64(r.Len) <= c.Addr+uint64(c.Len) {
			return true
		}
	}
	return false
}

// TestCaptureBoundStatic: calls without Dyn are captured exactly as declared.
func TestCaptureBoundStatic(t *testing.T) {
	for _, d := range All() {
		if d.Dyn != nil {
			continue
		}
		b := CaptureBound(d)
		if d.Kind == Unsupported {
			if b != nil {
				t.Errorf("%s: unsupported but has a bound", d.Name)
			}
			continue
		}
		if fmt.Sprint(b) != fmt.Sprint(d.Outs) {
			t.Errorf("%s: bound %v differs from Outs %v", d.Name, b, d.Outs)
		}
	}
}
