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

// noteMmap opens the file of a successful file-backed mmap. The descriptor
// is still open at the syscall-exit stop; when it is not (a source that
// delivers records later), the mapping itself is found in map_files.
func (s *session) noteMmap(rec *format.Syscall) {
	if rec.Nr != unix.SYS_MMAP || rec.Ret < 0 || rec.Args[3]&unix.MAP_ANONYMOUS != 0 || int32(rec.Args[4]) < 0 {
		return
	}
	start, length := uint64(rec.Ret), rec.Args[1]
	f, err := os.Open(fmt.Sprintf("/proc/%d/fd/%d", s.pid, int32(rec.Args[4])))
	if err != nil {
		f, err = s.mapFile(start)
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

// mapFile opens the file mapped at addr through /proc/PID/map_files.
func (s *session) mapFile(addr uint64) (*os.File, error) {
	maps, err := proc.ReadMaps(s.pid)
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if addr >= m.Start && addr < m.End && m.Inode != 0 {
			return os.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", s.pid, m.Start, m.End))
		}
	}
	return nil, fmt.Errorf("no file mapping at %#x", addr)
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
