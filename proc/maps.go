package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tprec/tprec/format"
)

// ReadMaps parses /proc/PID/maps.
func ReadMaps(pid int) ([]format.Mapping, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("read memory map: %w", err)
	}
	return ParseMaps(b)
}

// ParseMaps parses the text of a /proc/PID/maps file.
func ParseMaps(b []byte) ([]format.Mapping, error) {
	var out []format.Mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// start-end perms offset dev inode [path]
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("parse memory map line %q", line)
		}
		var m format.Mapping
		var ok bool
		if m.Start, m.End, ok = parseRange(f[0]); !ok {
			return nil, fmt.Errorf("parse memory map line %q", line)
		}
		var err3, err4 error
		m.Offset, err3 = strconv.ParseUint(f[2], 16, 64)
		m.Inode, err4 = strconv.ParseUint(f[4], 10, 64)
		if err3 != nil || err4 != nil || len(f[1]) < 4 {
			return nil, fmt.Errorf("parse memory map line %q", line)
		}
		p := f[1]
		if p[0] == 'r' {
			m.Prot |= format.ProtRead
		}
		if p[1] == 'w' {
			m.Prot |= format.ProtWrite
		}
		if p[2] == 'x' {
			m.Prot |= format.ProtExec
		}
		m.Shared = p[3] == 's'
		m.Dev = f[3]
		if len(f) > 5 {
			// The path is the rest of the line after the inode column; it may hold spaces.
			idx := strings.Index(line, f[5])
			m.Path = line[idx:]
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// Special reports mappings whose content cannot be read from outside or must
// not be recreated: [vvar], [vvar_vclock] (EIO/EFAULT on read) and [vsyscall]
// (fixed by the kernel at the same address in every process).
func Special(m format.Mapping) bool {
	return m.Path == "[vvar]" || m.Path == "[vvar_vclock]" || m.Path == "[vsyscall]"
}

// Tids lists the threads of pid (/proc/PID/task).
func Tids(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// ThreadNames reads the name (comm) of every thread of pid; a thread that
// ends meanwhile is left out.
func ThreadNames(pid int) []format.ThreadName {
	tids, _ := Tids(pid)
	var out []format.ThreadName
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
		if err != nil {
			continue
		}
		out = append(out, format.ThreadName{Tid: tid, Name: strings.TrimSuffix(string(b), "\n")})
	}
	return out
}

// DontForkRanges lists the ranges of pid's memory marked MADV_DONTFORK (the
// "dc" flag of /proc/PID/smaps), adjacent ones merged: a fork's child does
// not get them. V8 (node) marks its heap so.
func DontForkRanges(pid int) ([][2]uint64, error) {
	return FlagRanges(pid, "dc")
}

// WipeOnForkRanges lists the ranges of pid's memory that a fork's child
// gets as zeros ("wf": MADV_WIPEONFORK, and MAP_DROPPABLE mappings, where
// glibc 2.41 keeps the vDSO getrandom's state), adjacent ones merged.
func WipeOnForkRanges(pid int) ([][2]uint64, error) {
	return FlagRanges(pid, "wf")
}

// FlagRanges lists the ranges of pid's mappings whose VmFlags in
// /proc/PID/smaps have flag, adjacent ones merged.
func FlagRanges(pid int, flag string) ([][2]uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, fmt.Errorf("read smaps: %w", err)
	}
	return parseFlagRanges(b, flag), nil
}

// parseFlagRanges parses /proc/PID/smaps for FlagRanges.
func parseFlagRanges(b []byte, flag string) [][2]uint64 {
	var out [][2]uint64
	var lo, hi uint64
	for _, line := range bytes.Split(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmFlags:")); ok {
			for _, f := range bytes.Fields(rest) {
				if string(f) != flag || hi <= lo {
					continue
				}
				if n := len(out); n > 0 && out[n-1][1] == lo {
					out[n-1][1] = hi
				} else {
					out = append(out, [2]uint64{lo, hi})
				}
			}
			lo, hi = 0, 0
			continue
		}
		// A mapping's first line: "start-end perms ...".
		if i := bytes.IndexByte(line, ' '); i > 0 {
			if s, e, ok := parseRange(string(line[:i])); ok {
				lo, hi = s, e
			}
		}
	}
	return out
}

// parseRange parses a maps line's "start-end" (hexadecimal).
func parseRange(f string) (lo, hi uint64, ok bool) {
	a, z, ok := strings.Cut(f, "-")
	if !ok {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseUint(a, 16, 64)
	hi, err2 := strconv.ParseUint(z, 16, 64)
	return lo, hi, err1 == nil && err2 == nil
}
