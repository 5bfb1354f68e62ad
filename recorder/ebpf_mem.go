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
	// Adjacent or overlapping pieces make one segment: all copies were
	// taken at the same moment, so overlapping bytes agree. A run of
	// several is copied once into a buffer of its whole size (appending
	// piece by piece to a copy copied it again for each piece: the 400
	// pieces of a 12 MB read took the reader 2.4 s).
	for i := 0; i < len(segs); {
		run, end := segs[i], segs[i].addr+uint64(len(segs[i].data))
		j := i + 1
		for ; j < len(segs) && segs[j].addr <= end; j++ {
			end = max(end, segs[j].addr+uint64(len(segs[j].data)))
		}
		if j > i+1 {
			data := make([]byte, end-run.addr)
			for _, s := range segs[i:j] {
				copy(data[s.addr-run.addr:], s.data)
			}
			run.data = data
		}
		m.segs = append(m.segs, run)
		i = j
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
				why = fmt.Sprintf("the call wrote %d bytes, more than the eBPF side copies per call (a quarter of --ringbuf-size, at most 16 MiB)", it.len)
			case bpf.TprecTpItemKindTP_ITEM_UNSUPPORTED:
				why = "the eBPF side does not walk this output's layout"
			}
			break
		}
	}
	return nil, fmt.Errorf("output at %#x+%d not captured: %s", addr, n, why)
}
