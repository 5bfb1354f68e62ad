package recorder

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/internal/parallel"
	"github.com/tprec/tprec/internal/prefault"
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
	// big are the files of the window's mappings too large to read whole
	// (maxMappedAll), by mmap record, for the trial to read the pages it
	// touches (filePage).
	bigMu sync.Mutex
	big   map[uint64]*mappedFile
	// frozen holds the final pages copied from a process at its exit, or
	// at a crash whose handler runs (freeze), by address: read serves
	// them, and nothing else, the process being gone or running on.
	frozen map[uint64][]byte
	// clockSites are the vDSO entries the clock log points at its stubs:
	// the file holds their bytes from before it (unpatch).
	clockSites []clockSite
}

// unpatched returns page, read at addr, with the clock log's entries as a
// replay runs them (a copy when one is in it).
func (l *liveSource) unpatched(addr uint64, page []byte) []byte {
	for _, s := range l.clockSites {
		if s.entry >= addr && s.entry < addr+uint64(len(page)) {
			page = bytes.Clone(page)
			unpatch(l.clockSites, addr, page)
			return page
		}
	}
	return page
}

// frozenMax bounds the pages an exit dump copies to let the process go on
// exiting before its checkpoint is written (freeze): 256 MiB.
const frozenMax = 65536

// freeze copies the pages of the live references among refs from the
// stopped process, so that the dump needs nothing more of it. A shell
// waiting for a python3 that exited saw its exit 1.5 s late, the time of
// the trial replay and the write; sort 2.6 s, node 61 s. It does nothing
// and reports false for more than frozenMax pages (the process is then held
// until the file is written) or when a page cannot be read.
func (l *liveSource) freeze(refs []format.PageRef) bool {
	addrs := make([]uint64, 0, len(refs))
	for _, r := range refs {
		if a, ok := liveAddr(r.Hash); ok {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) > frozenMax {
		return false
	}
	buf := make([]byte, len(addrs)*format.PageSize)
	prefault.Slice(buf) // the process is held meanwhile
	if err := proc.ReadPages(l.pid, addrs, buf); err != nil {
		return false
	}
	l.frozen = make(map[uint64][]byte, len(addrs))
	for i, a := range addrs {
		l.frozen[a] = buf[i*format.PageSize : (i+1)*format.PageSize : (i+1)*format.PageSize]
	}
	l.heapBytes += int64(len(buf))
	return true
}

// filePage reads the page at addr of the mapping the mmap record seq made,
// one too large to be read whole at the dump, for the trial: a program that
// maps a large file and unmaps it in the window otherwise replays to a page
// the checkpoint lacks (glibc's iconv maps each input whole).
func (l *liveSource) filePage(seq, addr uint64) (format.Hash, bool) {
	l.bigMu.Lock()
	defer l.bigMu.Unlock()
	m := l.big[seq]
	if m == nil {
		return format.Hash{}, false
	}
	refs := m.pages([]uint64{addr}, l.store, nil)
	if len(refs) != 1 {
		return format.Hash{}, false
	}
	return refs[0].Hash, true
}

// addMappedPages adds to the mmap records of c that a replay from c's
// interval k runs through the pages of them the trial touched (served, by
// record) that they lack (a mapping too large to be read whole), read from
// the file now. A page of a mapping made before that start, still there
// and not in its start state (not present then), goes into that start as
// an original: a replay from it has it nowhere else.
func (l *liveSource) addMappedPages(c *format.Checkpoint, k int, served map[uint64][]uint64) {
	startSeq := c.Intervals[k].FirstSeq
	recs := map[uint64]*format.Syscall{}
	for i := range c.Syscalls {
		if rec := &c.Syscalls[i]; served[rec.Seq] != nil {
			recs[rec.Seq] = rec
		}
	}
	// content returns the content of rec's page at addr at the call.
	content := func(rec *format.Syscall, addr uint64) (format.Hash, bool) {
		if i, ok := slices.BinarySearchFunc(rec.Pages, addr, func(p format.PageRef, a uint64) int { return cmp.Compare(p.Addr, a) }); ok {
			return rec.Pages[i].Hash, true
		}
		return l.filePage(rec.Seq, addr)
	}
	state := c.StartState(k)
	for _, m := range format.FileMappedBefore(c.Syscalls, startSeq) {
		rec := recs[m.Seq]
		for _, a := range served[m.Seq] {
			if _, ok := state[a]; ok || rec == nil || a < m.Lo || a >= m.Hi {
				continue
			}
			if h, ok := content(rec, a); ok {
				state[a] = h
				c.Intervals[k].Written = append(c.Intervals[k].Written, format.PageRef{Addr: a, Hash: h})
			}
		}
	}
	slices.SortFunc(c.Intervals[k].Written, func(a, b format.PageRef) int { return cmp.Compare(a.Addr, b.Addr) })
	for seq, rec := range recs {
		if seq < startSeq || l.big[seq] == nil {
			continue
		}
		// A page two pieces served (the record's own, and the next one,
		// which began with the mapping in place) is added once.
		have := make(map[uint64]bool, len(rec.Pages))
		for _, p := range rec.Pages {
			have[p.Addr] = true
		}
		for _, a := range served[seq] {
			if have[a] {
				continue
			}
			if h, ok := l.filePage(seq, a); ok {
				have[a] = true
				rec.Pages = append(rec.Pages, format.PageRef{Addr: a, Hash: h})
			}
		}
		slices.SortFunc(rec.Pages, func(a, b format.PageRef) int { return cmp.Compare(a.Addr, b.Addr) })
	}
}

// closeBig closes the files filePage read.
func (l *liveSource) closeBig() {
	l.bigMu.Lock()
	defer l.bigMu.Unlock()
	for _, m := range l.big {
		m.f.Close()
	}
	l.big = nil
}

func (l *liveSource) read(addr uint64) ([]byte, error) {
	if i := l.shared.find(addr); i >= 0 {
		return l.shared.page(i), nil
	}
	if l.frozen != nil {
		if b, ok := l.frozen[addr]; ok {
			return l.unpatched(addr, b), nil
		}
		return nil, fmt.Errorf("read page %#x of %d: not among the pages copied when it was let go", addr, l.pid)
	}
	b := make([]byte, format.PageSize)
	n, err := proc.ReadBytes(l.pid, addr, b)
	if err != nil || n != len(b) {
		return nil, fmt.Errorf("read page %#x of %d: %v", addr, l.pid, err)
	}
	return l.unpatched(addr, b), nil
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

// fileNames renames the originals of the ring that c's intervals refer to
// with the names a file gives pages (format.HashPage): the ring names them
// by a cheaper hash of its own (ring.key). Only the pages a checkpoint
// keeps are hashed this way, after the trial.
func (l *liveSource) fileNames(c *format.Checkpoint) error {
	var todo []format.Hash
	seen := map[format.Hash]bool{}
	for _, iv := range c.Intervals {
		for _, p := range iv.Written {
			if _, ok := l.saved[p.Hash]; ok && !seen[p.Hash] {
				seen[p.Hash] = true
				todo = append(todo, p.Hash)
			}
		}
	}
	names := make([]format.Hash, len(todo))
	const chunk = 256
	err := parallel.Each((len(todo)+chunk-1)/chunk, func(i int) error {
		for k := i * chunk; k < min((i+1)*chunk, len(todo)); k++ {
			data, err := l.saved[todo[k]].page()
			if err != nil {
				return fmt.Errorf("an original of the ring: %w", err)
			}
			names[k] = format.HashPage(data)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rename := make(map[format.Hash]format.Hash, len(todo))
	for k, h := range todo {
		rename[h] = names[k]
		l.saved[names[k]] = l.saved[h]
	}
	// New lists: without a trial, they are the ring's own.
	for i := range c.Intervals {
		w := slices.Clone(c.Intervals[i].Written)
		for k, p := range w {
			if n, ok := rename[p.Hash]; ok {
				w[k].Hash = n
			}
		}
		c.Intervals[i].Written = w
	}
	return nil
}

// resolve reads the content of every live reference, stores it and returns
// the references with their real hashes. Unreadable pages are left out.
func (l *liveSource) resolve(refs []format.PageRef) ([]format.PageRef, error) {
	out := make([]format.PageRef, 0, len(refs))
	const batch = 1024
	buf := make([]byte, batch*format.PageSize)
	live, lost := 0, 0 // pages to read from the process, and those not read
	var lastErr error
	for _, r := range refs {
		if _, ok := liveAddr(r.Hash); ok {
			live++
		}
	}
	for i := 0; i < len(refs); i += batch {
		part := refs[i:min(i+batch, len(refs))]
		addrs := make([]uint64, len(part))
		allLive := true
		for j, r := range part {
			a, ok := liveAddr(r.Hash)
			addrs[j], allLive = a, allLive && ok
		}
		if allLive && l.frozen == nil && proc.ReadPages(l.pid, addrs, buf[:len(part)*format.PageSize]) == nil {
			for j, r := range part {
				data := buf[j*format.PageSize : (j+1)*format.PageSize]
				if k := l.shared.find(addrs[j]); k >= 0 {
					data = l.shared.page(k)
				}
				data = l.unpatched(addrs[j], data)
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
				lost, lastErr = lost+1, err
				continue
			}
			out = append(out, format.PageRef{Addr: r.Addr, Hash: l.store.Put(data)})
		}
	}
	if lost > 0 && lost == live {
		// Not one page: the process they come from is gone (a dump's
		// shadow killed under it wrote a file of no page that did not
		// replay). Better no checkpoint and a word than that.
		return nil, fmt.Errorf("none of the %d pages could be read from process %d: %w", live, l.pid, lastErr)
	}
	return out, nil
}
