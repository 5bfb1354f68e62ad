package gdb

import (
	"encoding/binary"
	"os"
	"strings"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/replayer"
)

// auxv types (include/uapi/linux/auxvec.h).
const (
	atNull   = 0
	atPhdr   = 3
	atPhent  = 4
	atPhnum  = 5
	atPagesz = 6
	atBase   = 7
	atEntry  = 9
)

// auxv returns the process's auxiliary vector. The kernel put it on the
// initial stack, above the environment pointers, and nothing moves it: it is
// read from the replayed stack when the checkpoint holds those pages. If it
// does not, a minimal vector is made from the executable's ELF header in
// memory (AT_PHDR, AT_PHNUM, AT_ENTRY, AT_BASE of the dynamic loader), which
// is what GDB needs to place a position-independent executable; with neither,
// the vector is empty.
func auxv(s *replayer.Session) []byte {
	c := s.Checkpoint()
	if len(c.Intervals) == 0 {
		return nil
	}
	maps := c.Intervals[len(c.Intervals)-1].Maps
	for _, m := range maps {
		if m.Path != "[stack]" {
			continue
		}
		if v := scanStack(s, m); v != nil {
			return v
		}
	}
	return synthAuxv(s, c, maps)
}

// scanStack looks for the auxv in the top 64 KiB of the stack mapping: a run
// of (type, value) pairs with small types, holding AT_PAGESZ = 4096 and
// AT_PHDR, ending with AT_NULL, right after the NULL that ends envp.
func scanStack(s *replayer.Session, m format.Mapping) []byte {
	const span = 64 << 10
	lo := m.Start
	if m.End-lo > span {
		lo = m.End - span
	}
	// Keep the readable top part only: the checkpoint may lack lower pages.
	var mem []byte
	for a := m.End - format.PageSize; a >= lo; a -= format.PageSize {
		page := make([]byte, format.PageSize)
		if n, err := s.ReadMemory(a, page); err != nil || n != len(page) {
			break
		}
		mem = append(page, mem...)
	}
	le := binary.LittleEndian
	q := func(off int) uint64 { return le.Uint64(mem[off:]) }
	for off := 8; off+16 <= len(mem); off += 8 {
		if q(off-8) != 0 {
			continue
		}
		pagesz, phdr := false, false
		for i := 0; i < 80 && off+16*i+16 <= len(mem); i++ {
			t, v := q(off+16*i), q(off+16*i+8)
			if t == atNull {
				if v == 0 && pagesz && phdr {
					return append([]byte(nil), mem[off:off+16*i+16]...)
				}
				break
			}
			if t > 64 {
				break
			}
			pagesz = pagesz || t == atPagesz && v == format.PageSize
			phdr = phdr || t == atPhdr && v != 0
		}
	}
	return nil
}

// synthAuxv builds the entries GDB uses from the ELF header of the
// executable's first mapping.
func synthAuxv(s *replayer.Session, c *format.Checkpoint, maps []format.Mapping) []byte {
	var exe, ld uint64
	for _, m := range maps {
		if m.Offset != 0 {
			continue
		}
		if exe == 0 && m.Path == c.Header.ExePath {
			exe = m.Start
		}
		if ld == 0 && strings.Contains(m.Path, "/ld-linux") {
			ld = m.Start
		}
	}
	if exe == 0 {
		return nil
	}
	var h [64]byte
	if n, err := s.ReadMemory(exe, h[:]); err != nil || n != len(h) || string(h[:4]) != "\x7fELF" {
		// A minimized checkpoint holds only the pages the window touched:
		// take the header from the executable on this machine, which the
		// debugger reads too (Symbolize checks its build-id the same way).
		f, err := os.Open(c.Header.ExePath)
		if err != nil {
			return nil
		}
		defer f.Close()
		if n, err := f.ReadAt(h[:], 0); err != nil || n != len(h) || string(h[:4]) != "\x7fELF" {
			return nil
		}
	}
	le := binary.LittleEndian
	entry, phoff := le.Uint64(h[0x18:]), le.Uint64(h[0x20:])
	phent, phnum := le.Uint16(h[0x36:]), le.Uint16(h[0x38:])
	if le.Uint16(h[0x10:]) == 3 { // ET_DYN: addresses are relative to the load base
		entry += exe
	}
	var out []byte
	put := func(t, v uint64) { out = le.AppendUint64(le.AppendUint64(out, t), v) }
	put(atPhdr, exe+phoff)
	put(atPhent, uint64(phent))
	put(atPhnum, uint64(phnum))
	put(atPagesz, format.PageSize)
	if ld != 0 {
		put(atBase, ld)
	}
	put(atEntry, entry)
	put(atNull, 0)
	return out
}
