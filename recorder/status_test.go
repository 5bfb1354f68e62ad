package recorder

import (
	"strings"
	"testing"
	"time"
)

// The ring keeps its newest interval whatever its size: a status line
// reading "ring 119.9 of 64 MiB" (grep -r over a large tree) looked like a
// limit that did not hold, and now says why.
func TestStatusLineOverMaxMemory(t *testing.T) {
	now := time.Now()
	s := &session{pid: 1, src: &ptraceSource{}, o: Options{MaxMemory: 64 << 20}, ring: &ring{}}
	s.ring.intervals = []*interval{{}}
	s.ring.intervals[0].meta.Start = now.Add(-time.Second)
	s.ring.bytes = 32 << 20
	if line := s.statusLine(now); !strings.Contains(line, "ring 32.0 of 64 MiB") || strings.Contains(line, "over --max-memory") {
		t.Errorf("within the limit: %s", line)
	}
	s.ring.bytes = 120 << 20
	if line := s.statusLine(now); !strings.Contains(line, "ring 120.0 of 64 MiB (over --max-memory: the newest interval, which the ring keeps whatever its size)") {
		t.Errorf("over the limit: %s", line)
	}
}
