package recorder

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A shadow keeps the original of every page the target writes in its
// interval, and those copies are charged to the target's memory cgroup.
// When the cgroup runs out, the OOM killer takes the shadow (cloneShadow's
// oom_score_adj), but each of its calls is a chance to take the target
// instead (a shadow already being torn down no longer counts, and the
// target is then the only task left). So where the target's memory cgroup
// has a limit, a shadow is made only when the room left can hold the copies
// the last interval's shadow kept, with a margin (shadowNoRoom).

// memoryCgroup names the directories of a process's memory cgroup and of
// those above it up to the hierarchy's root (not included), given its
// /proc/PID/cgroup and where the cgroup file systems are; v2 reports a
// unified hierarchy.
func memoryCgroup(cgroups, sysfs string) (dirs []string, v2 bool) {
	root, rel, v2 := cgroupOf(cgroups, sysfs, "memory")
	if root == "" {
		return nil, false
	}
	for dir := filepath.Join(root, rel); len(dir) > len(root); dir = filepath.Dir(dir) {
		dirs = append(dirs, dir)
	}
	return dirs, v2
}

// memoryRoom is the least room left (limit - usage, in bytes) over dirs;
// limited is false when none of them has a limit it can read.
func memoryRoom(dirs []string, v2 bool) (room int64, limited bool) {
	limitFile, usageFile := "memory.limit_in_bytes", "memory.usage_in_bytes"
	if v2 {
		limitFile, usageFile = "memory.max", "memory.current"
	}
	read := func(dir, file string) (int64, bool) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2), or v1's page counter maximum: no limit.
		return n, err == nil && n < 1<<62
	}
	for _, d := range dirs {
		limit, ok := read(d, limitFile)
		if !ok {
			continue
		}
		usage, ok := read(d, usageFile)
		if !ok {
			continue
		}
		if r := max(limit-usage, 0); !limited || r < room {
			room, limited = r, true
		}
	}
	return room, limited
}

// shadowSlack is room kept beyond a shadow's copies: the fork's page tables
// (about 1/512 of the memory mapped) and the target's own allocations
// meanwhile.
const shadowSlack = 16 << 20

// shadowNoRoom says why the next interval gets no shadow for want of
// memory, or "". The need is twice what the last shadow that lived through
// its interval kept (its originals), since a shadow's copies are freed only
// after the boundary that starts the next one, once they are read, while the
// target's writes already make the next one's; a quarter more and
// shadowSlack. Before any shadow lived through an interval, one is made,
// and the OOM killer takes it if it was wrong.
//
// A shadow the OOM killer took needed more than the room it was made with
// (shadowRoom): that becomes the need, so the next one waits until the
// cgroup has more room. The need then shrinks by 1/256 at each interval
// without a shadow, so that a program that writes less than it did gets
// one again (about half a minute later where the room stays the same).
func (s *session) shadowNoRoom() string {
	why, room := s.roomShort()
	s.shadowRoom = room
	if why != "" {
		s.lastCopies -= s.lastCopies / 256
	}
	return why
}

// roomShort says why the target's memory cgroup has no room for a shadow
// (shadowNoRoom), or "", and gives the room (-1 when nothing limits it).
func (s *session) roomShort() (string, int64) {
	if len(s.memDirs) == 0 {
		return "", -1
	}
	room, limited := memoryRoom(s.memDirs, s.memV2)
	if !limited {
		return "", -1
	}
	if !s.copiesKnown {
		return "", room
	}
	need := 2*s.lastCopies + s.lastCopies/4 + shadowSlack
	if room >= need {
		return "", room
	}
	return fmt.Sprintf("its memory cgroup has %d MiB left before its limit, and a shadow would need about %d MiB (twice the %d MiB of copies the last shadow needed, and a margin)", room>>20, need>>20, s.lastCopies>>20), room
}
