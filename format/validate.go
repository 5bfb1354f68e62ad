package format

import "fmt"

// problem is a rule of the model that a checkpoint breaks, with the section
// whose encoding carries the offending field.
type problem struct {
	sec uint32
	msg string
}

// checkModel enforces the rules every checkpoint obeys, on both sides: the
// writer refuses to write a model that breaks them (a recorder bug is caught
// before it becomes a file) and the reader refuses a file whose content does.
// have, when not nil, tells whether a non-zero page hash is in the page store.
func checkModel(c *Checkpoint, have func(Hash) bool) *problem {
	if c.Header.Interval < 0 {
		return &problem{SecHeader, fmt.Sprintf("negative interval length %v", c.Header.Interval)}
	}
	for i := range c.Intervals {
		iv := &c.Intervals[i]
		where := fmt.Sprintf("interval %d (index %d)", i, iv.Index)
		if i > 0 {
			prev := &c.Intervals[i-1]
			if iv.Index <= prev.Index {
				return &problem{SecInterval, fmt.Sprintf("%s: index not above the previous %d", where, prev.Index)}
			}
			if iv.FirstSeq < prev.FirstSeq {
				return &problem{SecInterval, fmt.Sprintf("%s: first syscall %d before the previous interval's %d", where, iv.FirstSeq, prev.FirstSeq)}
			}
		}
		tids := make(map[int]bool, len(iv.Threads))
		for _, t := range iv.Threads {
			if tids[t.Tid] {
				return &problem{SecInterval, fmt.Sprintf("%s: thread %d listed twice", where, t.Tid)}
			}
			tids[t.Tid] = true
		}
		var last uint64
		for j, m := range iv.Maps {
			if m.Start%PageSize != 0 || m.End%PageSize != 0 || m.Start >= m.End {
				return &problem{SecInterval, fmt.Sprintf("%s: mapping %#x-%#x is not a page-aligned range", where, m.Start, m.End)}
			}
			if j > 0 && m.Start < last {
				return &problem{SecInterval, fmt.Sprintf("%s: mapping %#x-%#x overlaps or precedes the previous one", where, m.Start, m.End)}
			}
			if m.Prot&^(ProtRead|ProtWrite|ProtExec) != 0 {
				return &problem{SecInterval, fmt.Sprintf("%s: mapping %#x-%#x has unknown protection bits %#x", where, m.Start, m.End, m.Prot)}
			}
			last = m.End
		}
		if msg := checkRefs(iv.Written, have); msg != "" {
			return &problem{SecInterval, where + ": written pages: " + msg}
		}
		if msg := checkRefs(iv.Digests, nil); msg != "" {
			return &problem{SecInterval, where + ": boundary digests: " + msg}
		}
	}
	if msg := checkRefs(c.Final, have); msg != "" {
		return &problem{SecFinal, "final pages: " + msg}
	}
	for i := range c.Syscalls {
		if msg := checkRefs(c.Syscalls[i].Pages, have); msg != "" {
			return &problem{SecSyscalls, fmt.Sprintf("syscall %d: mapped file pages: %s", c.Syscalls[i].Seq, msg)}
		}
	}
	for i := range c.Syscalls {
		s := &c.Syscalls[i]
		if s.Seq == 0 {
			return &problem{SecSyscalls, fmt.Sprintf("syscall %d has sequence number 0", i)}
		}
		if i > 0 && s.Seq <= c.Syscalls[i-1].Seq {
			return &problem{SecSyscalls, fmt.Sprintf("syscall %d: sequence number %d not above the previous %d", i, s.Seq, c.Syscalls[i-1].Seq)}
		}
	}
	for i := 1; i < len(c.Signals); i++ {
		if c.Signals[i].Seq < c.Signals[i-1].Seq {
			return &problem{SecSignals, fmt.Sprintf("signal %d: sequence number %d before the previous %d", i, c.Signals[i].Seq, c.Signals[i-1].Seq)}
		}
	}
	if msg := checkRefs(c.End.Digests, nil); msg != "" {
		return &problem{SecEnd, "digests: " + msg}
	}
	return nil
}

// checkRefs checks one list of page references: page-aligned, no address
// twice, and (when have is set) every non-zero hash in the store.
func checkRefs(refs []PageRef, have func(Hash) bool) string {
	seen := make(map[uint64]struct{}, len(refs))
	for _, p := range refs {
		if p.Addr%PageSize != 0 {
			return fmt.Sprintf("address %#x is not page-aligned", p.Addr)
		}
		if _, dup := seen[p.Addr]; dup {
			return fmt.Sprintf("page %#x listed twice", p.Addr)
		}
		seen[p.Addr] = struct{}{}
		if have != nil && p.Hash != ZeroHash && !have(p.Hash) {
			return fmt.Sprintf("page %#x refers to content %x that is not in the page store", p.Addr, p.Hash)
		}
	}
	return ""
}
