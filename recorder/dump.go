package recorder

import (
	"bufio"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
)

// maxDigests bounds the page digests kept in the end state.
const maxDigests = 256

// dump takes a checkpoint of the retained intervals, ending at end. It reads
// what it needs while the target is stopped, then finishes in the background
// (minimizing and writing do not need the target), so a crashing process
// dies and a running one resumes at once.
func (s *session) dump(end format.EndState, reason string) error {
	t0 := time.Now()
	c, store, err := s.collect(end, reason, t0)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("tp-%d-%s.tpc", s.pid, t0.UTC().Format("20060102T150405.000Z"))
	path := filepath.Join(s.o.OutputDir, name)
	s.pending.Add(1)
	go func() {
		defer s.pending.Done()
		if err := s.finish(path, c, store, t0); err != nil {
			s.logf("write checkpoint %s: %v", path, err)
		}
	}()
	return nil
}

// collect assembles the full checkpoint in memory: every page present at
// the start of the oldest interval or now, the originals the intervals saved,
// the syscall log and the end state.
func (s *session) collect(end format.EndState, reason string, t0 time.Time) (*format.Checkpoint, *format.MemStore, error) {
	if err := s.closeInterval(t0); err != nil {
		return nil, nil, err
	}
	ivs := s.ring.intervals
	if len(ivs) == 0 {
		return nil, nil, errors.New("nothing recorded yet")
	}
	var err error
	if end.XState, err = proc.GetXState(s.pid); err != nil {
		return nil, nil, err
	}
	end.Regs, _ = normalize(end.Regs)
	end.LastSeq = s.seq
	end.Rseq = threadRseq(s.pid)

	maps, err := proc.ReadMaps(s.pid)
	if err != nil {
		return nil, nil, err
	}
	now, err := s.presentPages(maps)
	if err != nil {
		return nil, nil, err
	}
	addrs := unionPages(ivs[0].present, now)
	store := format.NewMemStore()
	final := make([]format.PageRef, 0, len(addrs))
	finalOf := make(map[uint64]format.Hash, len(addrs))
	buf := make([]byte, 1024*format.PageSize)
	for i := 0; i < len(addrs); i += 1024 {
		batch := addrs[i:min(i+1024, len(addrs))]
		b := buf[:len(batch)*format.PageSize]
		ok := make([]bool, len(batch))
		if err := proc.ReadPages(s.pid, batch, b); err == nil {
			for j := range ok {
				ok[j] = true
			}
		} else {
			for j, a := range batch {
				n, _ := proc.ReadBytes(s.pid, a, b[j*format.PageSize:(j+1)*format.PageSize])
				ok[j] = n == format.PageSize
			}
		}
		for j, a := range batch {
			if !ok[j] {
				continue
			}
			h := store.Put(b[j*format.PageSize : (j+1)*format.PageSize])
			final = append(final, format.PageRef{Addr: a, Hash: h})
			finalOf[a] = h
		}
	}

	c := &format.Checkpoint{Header: s.hdr, Final: final, End: end}
	for _, iv := range ivs {
		for _, p := range iv.meta.Written {
			data, err := s.ring.page(p.Hash)
			if err != nil {
				return nil, nil, err
			}
			store.PutHashed(p.Hash, data)
		}
		c.Intervals = append(c.Intervals, iv.meta)
		c.Header.Lost += iv.lost
		for _, rec := range iv.syscalls {
			if m := iv.files[rec.Seq]; m != nil {
				rec.Pages = m.pages(addrs, store)
			}
			c.Syscalls = append(c.Syscalls, rec)
		}
		c.Signals = append(c.Signals, iv.signals...)
	}
	if c.End.Digests, err = digests(end.Regs.Rsp, ivs[len(ivs)-1].meta.Written, finalOf, store, end.Rseq); err != nil {
		return nil, nil, err
	}
	c.Header.DumpTime = time.Now()
	c.Header.Reason = reason
	c.Header.FullPages = true
	return c, store, nil
}

// finish minimizes the checkpoint (unless --full-pages) and writes it.
func (s *session) finish(path string, c *format.Checkpoint, store *format.MemStore, t0 time.Time) error {
	collected := time.Since(t0)
	full := len(c.Final)
	if !s.o.FullPages {
		minimize(c, store, s.logf)
	}
	if err := format.Write(path, c, store); err != nil {
		return err
	}
	var size int64
	if st, err := os.Stat(path); err == nil {
		size = st.Size()
	}
	kept := "every present page"
	if !c.Header.FullPages {
		kept = fmt.Sprintf("%d touched pages of %d", len(c.Final), full)
	}
	s.logf("wrote %s: %d intervals, %d syscalls, %s, %d bytes, in %v (process released after %v)",
		path, len(c.Intervals), len(c.Syscalls), kept, size, time.Since(t0).Round(time.Millisecond), collected.Round(time.Millisecond))
	s.mu.Lock()
	s.dumps = append(s.dumps, path)
	s.mu.Unlock()
	if s.o.Dumped != nil {
		s.o.Dumped(path)
	}
	return nil
}

// digests picks the end-state pages a replay compares to tell apart two
// points with equal registers: the stack page under rsp and the pages written
// in the last interval.
func digests(rsp uint64, written []format.PageRef, final map[uint64]format.Hash, store format.PageSource, rs format.Rseq) ([]format.PageRef, error) {
	var out []format.PageRef
	seen := map[uint64]bool{}
	add := func(a uint64) error {
		h, ok := final[a]
		if !ok || seen[a] || len(out) >= maxDigests {
			return nil
		}
		seen[a] = true
		data, err := store.Page(h)
		if err != nil {
			return err
		}
		out = append(out, format.PageRef{Addr: a, Hash: format.DigestPage(a, data, rs)})
		return nil
	}
	if err := add(rsp &^ (format.PageSize - 1)); err != nil {
		return nil, err
	}
	for _, p := range written {
		if err := add(p.Addr); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// unionPages returns the sorted page addresses in either list of runs.
func unionPages(a, b []pageRun) []uint64 {
	set := map[uint64]struct{}{}
	for _, runs := range [][]pageRun{a, b} {
		for _, r := range runs {
			for p := r.start; p < r.end; p += format.PageSize {
				set[p] = struct{}{}
			}
		}
	}
	out := make([]uint64, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// buildID returns the hex GNU build-id of an ELF file, or "".
func buildID(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_NOTE {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			continue
		}
		for len(data) >= 12 {
			nsz := int(f.ByteOrder.Uint32(data[0:]))
			dsz := int(f.ByteOrder.Uint32(data[4:]))
			typ := f.ByteOrder.Uint32(data[8:])
			off := 12 + (nsz+3)&^3
			if off+dsz > len(data) {
				break
			}
			if typ == 3 && nsz == 4 && string(data[12:15]) == "GNU" {
				return hex.EncodeToString(data[off : off+dsz])
			}
			data = data[off+(dsz+3)&^3:]
		}
	}
	return ""
}

// cpuFlags returns the ISA flags of the first CPU in /proc/cpuinfo.
func cpuFlags() []string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "flags" {
			return strings.Fields(v)
		}
	}
	return nil
}
