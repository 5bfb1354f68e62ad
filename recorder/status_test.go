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

// A status line says what the recording cost since the one before: tprec's
// CPU in percent of one and the share of the time boundaries held the
// process. The first counts from the start of the recording.
func TestStatusLineCost(t *testing.T) {
	now := time.Now()
	s := &session{mark: costMark{at: now.Add(-10 * time.Second), cpu: time.Second, held: 100 * time.Millisecond}}
	s.heldAll = 300 * time.Millisecond
	want := "; over the last 10s tprec took 20.0% of a CPU and its boundaries held the process 2.0% of the time"
	if got := s.costSince(now, 3*time.Second); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	s.heldAll += 50 * time.Millisecond
	want = "; over the last 5s tprec took 4.0% of a CPU and its boundaries held the process 1.0% of the time"
	if got := s.costSince(now.Add(5*time.Second), 3200*time.Millisecond); got != want {
		t.Errorf("second line: got %q, want %q", got, want)
	}
	if got := (&session{}).costSince(now, time.Second); got != "" {
		t.Errorf("without a start: %q", got)
	}
}
