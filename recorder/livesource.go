package recorder

import (
	"encoding/binary"
	"fmt"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
)

// liveMagic marks a page reference whose content has not been read yet: the
// page is to be read from the live source at the address in the hash's last
// 8 bytes. Such references never reach a file (resolve replaces them).
var liveMagic = [8]byte{0xff, 't', 'p', 'l', 'i', 'v', 'e', 0xff}

func liveHash(addr uint64) format.Hash {
	var h format.Hash
	copy(h[:8], liveMagic[:])
	binary.LittleEndian.PutUint64(h[8:], addr)
	return h
}

func liveAddr(h format.Hash) (uint64, bool) {
	if [8]byte(h[:8]) != liveMagic {
		return 0, false
	}
	return binary.LittleEndian.Uint64(h[8:]), true
}

// liveSource serves the pages of a checkpoint being assembled: stored pages
// from store, pages named by liveHash from the memory of a stopped process
// (the target, or a dump shadow forked from it when the dump was taken),
// except its shared writable pages: a fork shares them, and other processes
// may go on writing them, so their content is the copy taken with the target
// held (shared).
type liveSource struct {
	pid   int
	store *format.MemStore
	// saved are the originals the ring saved, decompressed when read: a
	// minimized checkpoint keeps a few of them (redis: 2,700 of 19,000),
	// and decompressing them all up front took a quarter to half a second
	// and 78 MB, which kept the collector running back to back at the
	// memory limit through the rest of the dump (its write took 1.3 s
	// instead of 0.7).
	saved  map[format.Hash]*blob
	shared *sharedPages
	// heapBytes estimates the memory the assembled checkpoint takes
	// besides the ring: its records and its saved pages (dumpMemory).
	heapBytes int64
}

func (l *liveSource) read(addr uint64) ([]byte, error) {
	if i := l.shared.find(addr); i >= 0 {
		return l.shared.page(i), nil
	}
	b := make([]byte, format.PageSize)
	n, err := proc.ReadBytes(l.pid, addr, b)
	if err != nil || n != len(b) {
		return nil, fmt.Errorf("read page %#x of %d: %v", addr, l.pid, err)
	}
	return b, nil
}

// Page implements format.PageSource.
func (l *liveSource) Page(h format.Hash) ([]byte, error) {
	if a, ok := liveAddr(h); ok {
		return l.read(a)
	}
	if b, ok := l.saved[h]; ok {
		return b.page()
	}
	return l.store.Page(h)
}

// resolve reads the content of every live reference, stores it and returns
// the references with their real hashes. Unreadable pages are left out.
func (l *liveSource) resolve(refs []format.PageRef) ([]format.PageRef, error) {
	out := make([]format.PageRef, 0, len(refs))
	const batch = 1024
	buf := make([]byte, batch*format.PageSize)
	for i := 0; i < len(refs); i += batch {
		part := refs[i:min(i+batch, len(refs))]
		addrs := make([]uint64, len(part))
		allLive := true
		for j, r := range part {
			a, ok := liveAddr(r.Hash)
			addrs[j], allLive = a, allLive && ok
		}
		if allLive && proc.ReadPages(l.pid, addrs, buf[:len(part)*format.PageSize]) == nil {
			for j, r := range part {
				data := buf[j*format.PageSize : (j+1)*format.PageSize]
				if k := l.shared.find(addrs[j]); k >= 0 {
					data = l.shared.page(k)
				}
				out = append(out, format.PageRef{Addr: r.Addr, Hash: l.store.Put(data)})
			}
			continue
		}
		for _, r := range part {
			if _, ok := liveAddr(r.Hash); !ok {
				out = append(out, r)
				continue
			}
			data, err := l.Page(r.Hash)
			if err != nil {
				continue
			}
			out = append(out, format.PageRef{Addr: r.Addr, Hash: l.store.Put(data)})
		}
	}
	return out, nil
}
