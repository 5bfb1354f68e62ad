package recorder

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/tprec/tprec/bpf"
)

// capturedMem serves reads from the memory an eBPF record captured, so that
// syscalls.Outputs runs on it exactly as it runs on the live process in the
// ptrace backend. A read it cannot serve in full is an error naming why the
// bytes are missing.
type capturedMem struct {
	segs    []memSeg // contiguous, sorted, non-overlapping
	missing []item   // unreadable, too big, unsupported
	scratch []memSeg // reset's work list, kept for reuse
}

type memSeg struct {
	addr uint64
	data []byte
}

func newCapturedMem(items []item) *capturedMem {
	m := &capturedMem{}
	m.reset(items)
	return m
}

// reset indexes the memory of items, reusing m's storage.
func (m *capturedMem) reset(items []item) {
	clear(m.segs)
	clear(m.missing)
	segs := m.scratch[:0]
	m.segs, m.missing = m.segs[:0], m.missing[:0]
	for _, it := range items {
		switch it.kind {
		case bpf.TprecTpItemKindTP_ITEM_MEM:
			if len(it.data) > 0 {
				segs = append(segs, memSeg{it.addr, it.data})
			}
		case bpf.TprecTpItemKindTP_ITEM_UNREADABLE, bpf.TprecTpItemKindTP_ITEM_TOOBIG, bpf.TprecTpItemKindTP_ITEM_UNSUPPORTED:
			m.missing = append(m.missing, it)
		}
	}
	slices.SortStableFunc(segs, func(a, b memSeg) int { return cmp.Compare(a.addr, b.addr) })
	for _, s := range segs {
		n := len(m.segs)
		if n > 0 {
			last := &m.segs[n-1]
			end := last.addr + uint64(len(last.data))
			if s.addr <= end {
				// Adjacent or overlapping: all copies were taken at the same
				// moment, so overlapping bytes agree.
				if tail := s.addr + uint64(len(s.data)); tail > end {
					last.data = append(last.data[:len(last.data):len(last.data)], s.data[end-s.addr:]...)
				}
				continue
			}
		}
		m.segs = append(m.segs, s)
	}
	clear(segs)
	m.scratch = segs[:0]
}

// read returns n captured bytes at addr.
func (m *capturedMem) read(addr uint64, n int) ([]byte, error) {
	i := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].addr+uint64(len(m.segs[i].data)) > addr })
	if i < len(m.segs) {
		s := m.segs[i]
		if s.addr <= addr && addr+uint64(n) <= s.addr+uint64(len(s.data)) && addr+uint64(n) >= addr {
			o := addr - s.addr
			return s.data[o : o+uint64(n) : o+uint64(n)], nil
		}
	}
	why := "outside what the syscall table let the eBPF side copy"
	for _, it := range m.missing {
		if addr < it.addr+uint64(it.len) && it.addr < addr+uint64(n) || it.kind == bpf.TprecTpItemKindTP_ITEM_UNSUPPORTED {
			switch it.kind {
			case bpf.TprecTpItemKindTP_ITEM_UNREADABLE:
				why = "the eBPF side could not read it"
			case bpf.TprecTpItemKindTP_ITEM_TOOBIG:
				why = fmt.Sprintf("the call wrote more than the %d bytes the eBPF side copies per call", MaxCapture)
			case bpf.TprecTpItemKindTP_ITEM_UNSUPPORTED:
				why = "the eBPF side does not walk this output's layout"
			}
			break
		}
	}
	return nil, fmt.Errorf("output at %#x+%d not captured: %s", addr, n, why)
}
