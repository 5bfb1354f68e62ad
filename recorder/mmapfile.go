package recorder

import (
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
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

// noteMmap opens the file of a successful file-backed mmap. At a ptrace
// syscall-exit stop the descriptor is still the one mapped. A source that
// delivers records later (eBPF, at the next boundary) may find the
// descriptor closed or, worse, reused for another file: it takes the file of
// the mapping itself (map_files), checked against the mapping's device and
// inode, or marks the interval not replayable.
func (s *session) noteMmap(rec *format.Syscall) {
	if rec.Nr != unix.SYS_MMAP || rec.Ret < 0 || rec.Args[3]&unix.MAP_ANONYMOUS != 0 || int32(rec.Args[4]) < 0 {
		return
	}
	start, length := uint64(rec.Ret), rec.Args[1]
	var f *os.File
	var err error
	if _, atExit := s.src.(ptraceSource); atExit {
		f, err = os.Open(fmt.Sprintf("/proc/%d/fd/%d", s.pid, int32(rec.Args[4])))
	} else {
		f, err = s.mapFile(start, rec.Args[5])
	}
	if err != nil {
		s.notReplayable(fmt.Sprintf("mmap at seq %d: cannot open the mapped file: %v", rec.Seq, err))
		return
	}
	if s.cur.files == nil {
		s.cur.files = map[uint64]*mappedFile{}
	}
	s.cur.files[rec.Seq] = &mappedFile{f: f, start: start, length: length, offset: rec.Args[5]}
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

// pages reads the file's content for the pages of the mapping: all of them
// for a mapping up to maxMappedAll, else those in the sorted list addrs.
func (m *mappedFile) pages(addrs []uint64, store *format.MemStore) []format.PageRef {
	end := m.start + (m.length+format.PageSize-1)&^(format.PageSize-1)
	var want []uint64
	if end-m.start <= maxMappedAll {
		for a := m.start; a < end; a += format.PageSize {
			want = append(want, a)
		}
	} else {
		i := sort.Search(len(addrs), func(i int) bool { return addrs[i] >= m.start })
		for ; i < len(addrs) && addrs[i] < end; i++ {
			want = append(want, addrs[i])
		}
	}
	var out []format.PageRef
	buf := make([]byte, format.PageSize)
	for _, a := range want {
		clear(buf) // past the end of the file the mapping reads zeros
		if _, err := m.f.ReadAt(buf, int64(m.offset+a-m.start)); err != nil && err != io.EOF {
			continue
		}
		out = append(out, format.PageRef{Addr: a, Hash: store.Put(buf)})
	}
	return out
}

func (iv *interval) closeFiles() {
	for _, m := range iv.files {
		m.f.Close()
	}
	iv.files = nil
}
