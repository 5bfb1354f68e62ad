package recorder

import (
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/syscalls"
	"golang.org/x/sys/unix"
)

// mappedFile keeps the file behind an mmap made during an interval, so the
// dump can give a replay the content the new mapping started with (a replay
// maps anonymous memory there: it has no files).
type mappedFile struct {
	f      *os.File
	start  uint64 // mapping address (the call's result)
	length uint64
	offset uint64 // file offset of start
}

// noteMmap opens the file of a successful file-backed mmap, at its ptrace
// syscall-exit stop, where the descriptor is still the one mapped. The eBPF
// source sees calls later: its file mmaps are opened at the programs' signal
// right after the call (openMarkedMmap) and matched with their records once
// the interval's log is complete (resolveMmaps).
func (s *session) noteMmap(rec *format.Syscall) {
	if !format.FileMmap(rec) {
		return
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd/%d", s.pid, int32(rec.Args[4])))
	if err != nil {
		s.notReplayable(fmt.Sprintf("mmap at seq %d: cannot open the mapped file: %v", rec.Seq, err))
		return
	}
	s.addMappedFile(rec, f)
}

func (s *session) addMappedFile(rec *format.Syscall, f *os.File) {
	if s.cur.files == nil {
		s.cur.files = map[uint64]*mappedFile{}
	}
	s.cur.files[rec.Seq] = &mappedFile{f: f, start: uint64(rec.Ret), length: rec.Args[1], offset: rec.Args[5]}
}

// openMarkedMmap runs at the signal-delivery stop the eBPF programs cause
// right after a file mmap returns (ownSignal): the registers still hold the
// call's arguments and result, and the descriptor is still the one mapped.
// The file is opened now and matched with the call's record when the
// interval's log is complete (resolveMmaps), so a mapping the program
// removes before the boundary keeps its content.
func (s *session) openMarkedMmap(tid int) {
	regs, err := proc.GetRegs(tid)
	if err != nil || regs.OrigRax != unix.SYS_MMAP || int64(regs.Rax) < 0 || regs.R10&unix.MAP_ANONYMOUS != 0 {
		return // the programs' signal for a crowded ring buffer
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd/%d", s.pid, int32(regs.R8)))
	if err != nil {
		return // resolveMmaps tries /proc/PID/map_files, and says why if it cannot
	}
	s.marked = append(s.marked, &mappedFile{f: f, start: regs.Rax, length: regs.Rsi, offset: regs.R9})
}

// takeMarked returns the file opened at the mark of the mmap rec, if any.
func (s *session) takeMarked(rec *format.Syscall) *os.File {
	for i, m := range s.marked {
		if m.start == uint64(rec.Ret) && m.length == rec.Args[1] && m.offset == rec.Args[5] {
			s.marked = append(s.marked[:i], s.marked[i+1:]...)
			return m.f
		}
	}
	return nil
}

// dropMarked closes the files of marks no logged call claimed.
func (s *session) dropMarked() {
	for _, m := range s.marked {
		m.f.Close()
	}
	s.marked = nil
}

// resolveMmaps opens the files of the mmaps a late source delivered, with the
// interval's log complete and the target stopped. A mapping is taken from
// /proc/PID/map_files only if no later call of the log mapped, unmapped or
// moved memory over it (then what is there now is its own); otherwise its
// content cannot be known and the interval is not replayable.
func (s *session) resolveMmaps() {
	iv := s.cur
	if iv == nil {
		return
	}
	defer s.dropMarked()
	// The calls that changed memory, decoded once: each pending mmap is
	// checked against all of them, and a call of the log is decoded from
	// its block's mark (callLog.at).
	var memRecs []*format.Syscall
	if len(iv.pendingMmaps) > 0 {
		memRecs = make([]*format.Syscall, len(iv.memCalls))
		for k, j := range iv.memCalls {
			memRecs[k] = iv.syscalls.at(j)
		}
	}
	for _, i := range iv.pendingMmaps {
		rec := iv.syscalls.at(i)
		if f := s.takeMarked(rec); f != nil {
			s.addMappedFile(rec, f)
			continue
		}
		start := uint64(rec.Ret)
		end := start + (rec.Args[1]+format.PageSize-1)&^(format.PageSize-1)
		var err error
		for k, j := range iv.memCalls {
			later := memRecs[k]
			if j <= i {
				continue
			}
			if r, n := format.MemoryChanges(later); n > 0 && (r[0].Overlaps(start, end) || n > 1 && r[1].Overlaps(start, end)) {
				err = fmt.Errorf("the mapping was changed by %s at seq %d before the recorder saw it", syscalls.Name(later.Nr), later.Seq)
				break
			}
		}
		var f *os.File
		if err == nil {
			f, err = s.mapFile(start, rec.Args[5])
		}
		if err != nil {
			s.notReplayable(fmt.Sprintf("mmap at seq %d: cannot open the mapped file: %v", rec.Seq, err))
			continue
		}
		s.addMappedFile(rec, f)
	}
	iv.pendingMmaps = nil
}

// remapped lists the ranges the interval's calls mapped, unmapped or moved.
func (iv *interval) remapped() []format.Span {
	var out []format.Span
	for _, j := range iv.memCalls {
		r, n := format.MemoryChanges(iv.syscalls.at(j))
		out = append(out, r[:n]...)
	}
	return out
}

// mapFile opens the file mapped at addr (file offset off there) through
// /proc/PID/map_files, if that mapping is still in place.
func (s *session) mapFile(addr, off uint64) (*os.File, error) {
	maps, err := proc.ReadMaps(s.pid)
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if addr < m.Start || addr >= m.End || m.Inode == 0 {
			continue
		}
		if m.Offset+(addr-m.Start) != off {
			break // something else is mapped there now
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", s.pid, m.Start, m.End))
		if err != nil {
			return nil, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Ino != m.Inode {
			f.Close()
			return nil, fmt.Errorf("the mapping at %#x changed since the call", addr)
		}
		return f, nil
	}
	return nil, fmt.Errorf("the mapping at %#x is gone (unmapped within the interval)", addr)
}

// maxMappedAll bounds the mappings whose every page goes into the checkpoint.
// A mapping made and unmapped inside the window (ld.so.cache, for one) leaves
// no trace in the final page set, so its pages are taken whole; bigger
// mappings contribute the pages of the final page set only.
const maxMappedAll = 64 << 20

// filePageKey names one page of a file: its device, inode and offset.
type filePageKey struct{ dev, ino, off uint64 }

// filePageCache holds, for one dump, the hash of every file page read for
// the mappings of its window: a program that maps the same file again and
// again (python3 mapping a 20 MB file 480 times in 2 s) has it read once,
// not once a mapping (10.6 s of reading and hashing while the process was
// held, against tens of milliseconds). Every read happens at the dump, from
// the file as it is then, so the same page of the same file reads the same.
type filePageCache map[filePageKey]format.Hash

// end is where the mapping ends.
func (m *mappedFile) end() uint64 {
	return m.start + (m.length+format.PageSize-1)&^(format.PageSize-1)
}

// readWhole reports whether the dump reads every page of the mapping
// (maxMappedAll); of a larger one, the trial reads those it touches.
func (m *mappedFile) readWhole() bool { return m.end()-m.start <= maxMappedAll }

// pages reads the file's content for the pages of the mapping: all of them
// for a mapping up to maxMappedAll, else those in the sorted list addrs.
// cache, when not nil, gives the pages read before and takes those read now.
func (m *mappedFile) pages(addrs []uint64, store *format.MemStore, cache filePageCache) []format.PageRef {
	end := m.end()
	var want []uint64
	if m.readWhole() {
		for a := m.start; a < end; a += format.PageSize {
			want = append(want, a)
		}
	} else {
		i := sort.Search(len(addrs), func(i int) bool { return addrs[i] >= m.start })
		for ; i < len(addrs) && addrs[i] < end; i++ {
			want = append(want, addrs[i])
		}
	}
	var st unix.Stat_t
	if cache != nil && unix.Fstat(int(m.f.Fd()), &st) != nil {
		cache = nil
	}
	var out []format.PageRef
	buf := make([]byte, format.PageSize)
	for _, a := range want {
		off := m.offset + a - m.start
		key := filePageKey{dev: st.Dev, ino: st.Ino, off: off}
		if h, ok := cache[key]; ok {
			out = append(out, format.PageRef{Addr: a, Hash: h})
			continue
		}
		clear(buf) // past the end of the file the mapping reads zeros
		if _, err := m.f.ReadAt(buf, int64(off)); err != nil && err != io.EOF {
			continue
		}
		h := store.Put(buf)
		if cache != nil {
			cache[key] = h
		}
		out = append(out, format.PageRef{Addr: a, Hash: h})
	}
	return out
}

func (iv *interval) closeFiles() {
	for _, m := range iv.files {
		m.f.Close()
	}
	iv.files = nil
}
