package proc

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tprec/tprec/format"
)

// maxModules bounds the walk of a link map, against a loop in corrupt memory.
const maxModules = 4096

// LinkMap reads the dynamic loader's list of loaded objects from the memory
// of pid: the chain of struct link_map that the loader's r_debug (_r_debug
// in ld.so) starts. maps is the process's memory map. Each object's
// thread-local storage module id and static offset come from the fields the
// C library describes for thread debuggers (glibc's _thread_db_link_map_*
// descriptors: bit size, count and offset of a field); without them those
// stay 0. A process without a dynamic loader (a static program) has no list:
// nil and no error.
func LinkMap(pid int, maps []format.Mapping) ([]format.Module, error) {
	rdebug, ok := findSymbols(pid, maps, []string{"_r_debug"}, func(m format.Mapping) bool {
		return strings.HasPrefix(filepath.Base(m.Path), "ld-")
	})["_r_debug"]
	if !ok {
		return nil, nil
	}
	var word [8]byte
	if err := readFull(pid, rdebug+8, word[:]); err != nil { // r_debug.r_map
		return nil, fmt.Errorf("read r_debug: %w", err)
	}
	lm := binary.LittleEndian.Uint64(word[:])
	modid, offset := tlsFields(pid, maps)
	var out []format.Module
	seen := map[uint64]bool{}
	for lm != 0 && len(out) < maxModules {
		if seen[lm] {
			return nil, fmt.Errorf("link map: loop at %#x", lm)
		}
		seen[lm] = true
		var rec [40]byte // l_addr, l_name, l_ld, l_next, l_prev
		if err := readFull(pid, lm, rec[:]); err != nil {
			return nil, fmt.Errorf("link map entry %#x: %w", lm, err)
		}
		m := format.Module{
			LinkMap: lm,
			LAddr:   binary.LittleEndian.Uint64(rec[0:]),
			LD:      binary.LittleEndian.Uint64(rec[16:]),
		}
		m.Name = readString(pid, binary.LittleEndian.Uint64(rec[8:]))
		if modid != 0 && offset != 0 {
			var f [16]byte
			if readFull(pid, lm+modid, f[:8]) == nil && readFull(pid, lm+offset, f[8:]) == nil {
				m.TLSModID = binary.LittleEndian.Uint64(f[:8])
				m.TLSOffset = int64(binary.LittleEndian.Uint64(f[8:]))
			}
		}
		out = append(out, m)
		lm = binary.LittleEndian.Uint64(rec[24:])
	}
	return out, nil
}

// tlsFields returns the offsets of l_tls_modid and l_tls_offset in struct
// link_map as the C library's thread-debugging descriptors give them, or 0
// when it has none (not glibc, or a glibc without them).
func tlsFields(pid int, maps []format.Mapping) (modid, offset uint64) {
	const modidSym, offsetSym = "_thread_db_link_map_l_tls_modid", "_thread_db_link_map_l_tls_offset"
	addrs := findSymbols(pid, maps, []string{modidSym, offsetSym}, func(m format.Mapping) bool {
		return strings.HasPrefix(filepath.Base(m.Path), "libc.so")
	})
	field := func(name string) uint64 {
		addr, ok := addrs[name]
		if !ok {
			return 0
		}
		var d [12]byte
		if readFull(pid, addr, d[:]) != nil {
			return 0
		}
		bits, count := binary.LittleEndian.Uint32(d[0:]), binary.LittleEndian.Uint32(d[4:])
		if bits != 64 || count != 1 {
			return 0 // a layout this reader does not know
		}
		return uint64(binary.LittleEndian.Uint32(d[8:]))
	}
	return field(modidSym), field(offsetSym)
}

// findSymbols returns the addresses in pid of the dynamic symbols names, as
// defined by the first mapped file that want accepts and that defines any
// of them (read through /proc/PID/map_files: the very file mapped, even if
// replaced on disk since).
func findSymbols(pid int, maps []format.Mapping, names []string, want func(format.Mapping) bool) map[string]uint64 {
	for _, m := range maps {
		if m.Offset != 0 || m.Inode == 0 || !strings.HasPrefix(m.Path, "/") || !want(m) {
			continue
		}
		f, err := elf.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End))
		if err != nil {
			f, err = elf.Open(m.Path)
		}
		if err != nil {
			continue
		}
		syms, _ := f.DynamicSymbols()
		bias := m.Start - FirstLoad(f)
		f.Close()
		out := map[string]uint64{}
		for _, s := range syms {
			if s.Section != elf.SHN_UNDEF && slices.Contains(names, s.Name) {
				out[s.Name] = bias + s.Value
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// FirstLoad is the page-aligned address of f's lowest loadable segment: what
// its mapping of file offset 0 starts at, before the load bias (0 for a file
// without one).
func FirstLoad(f *elf.File) uint64 {
	low := uint64(0)
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && (!found || p.Vaddr < low) {
			low, found = p.Vaddr, true
		}
	}
	return low &^ (format.PageSize - 1)
}

func readFull(pid int, addr uint64, b []byte) error {
	n, err := ReadBytes(pid, addr, b)
	if err == nil && n != len(b) {
		err = errors.New("short read")
	}
	if err != nil {
		return fmt.Errorf("read %d bytes at %#x of %d: %w", len(b), addr, pid, err)
	}
	return nil
}

// readString reads a NUL-terminated string of at most 4 KB at addr; an
// unreadable one is "".
func readString(pid int, addr uint64) string {
	if addr == 0 {
		return ""
	}
	var out []byte
	buf := make([]byte, 256)
	for len(out) < 4096 {
		// Stop each read at a page end: the next page may not be mapped.
		n := min(uint64(len(buf)), format.PageSize-(addr%format.PageSize))
		got, err := ReadBytes(pid, addr, buf[:n])
		if err != nil || got == 0 {
			break
		}
		if i := bytes.IndexByte(buf[:got], 0); i >= 0 {
			return string(append(out, buf[:i]...))
		}
		out = append(out, buf[:got]...)
		addr += uint64(got)
	}
	return string(out)
}

// GlibcRseq says where glibc 2.35 and later keep each thread's rseq area:
// offset bytes from the thread pointer (fs_base), size bytes (from the
// __rseq_offset and __rseq_size its loader exports, read from pid's
// memory). ok is false when pid's loader exports neither, or glibc did not
// register an area (size 0: glibc.pthread.rseq=0, or a kernel without
// rseq). It is how the areas are found on a kernel that cannot be asked
// (GetRseq: before Linux 5.13) where userland is newer than the kernel (a
// container).
func GlibcRseq(pid int, maps []format.Mapping) (offset int64, size uint32, ok bool) {
	const offSym, sizeSym = "__rseq_offset", "__rseq_size"
	addrs := findSymbols(pid, maps, []string{offSym, sizeSym}, func(m format.Mapping) bool {
		return strings.HasPrefix(filepath.Base(m.Path), "ld-")
	})
	oa, ok1 := addrs[offSym]
	sa, ok2 := addrs[sizeSym]
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	var o [8]byte
	var n [4]byte
	if readFull(pid, oa, o[:]) != nil || readFull(pid, sa, n[:]) != nil {
		return 0, 0, false
	}
	size = binary.LittleEndian.Uint32(n[:])
	if size == 0 {
		return 0, 0, false
	}
	// glibc registers the 32 bytes of the original structure at least;
	// from 2.40 __rseq_size gives the part of it in use (20).
	return int64(binary.LittleEndian.Uint64(o[:])), max(size, rseqMinSize), true
}

// rseqMinSize is the size of the original struct rseq (linux/rseq.h).
const rseqMinSize = 32

// RseqSig is the signature glibc registers rseq areas with on x86
// (RSEQ_SIG, sysdeps/unix/sysv/linux/x86/bits/rseq.h).
const RseqSig = 0x53053053
