package replayer

import (
	"debug/elf"
	"fmt"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
)

// Symbolize names the function of the recorded executable that holds addr,
// as "name+0xoff", when Header.ExePath exists on this machine with the
// recorded build-id and addr lies in one of its mappings in the last
// interval's map. It returns "" otherwise: a symbol from a different build
// would be a lie.
func Symbolize(c *format.Checkpoint, addr uint64) string {
	h := c.Header
	if h.ExePath == "" || h.BuildID == "" || len(c.Intervals) == 0 {
		return ""
	}
	f, err := elf.Open(h.ExePath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if id, ok := buildID(f); !ok || id != h.BuildID {
		return ""
	}
	maps := c.Intervals[len(c.Intervals)-1].Maps
	var m *format.Mapping
	for i := range maps {
		if maps[i].Path == h.ExePath && maps[i].Start <= addr && addr < maps[i].End {
			m = &maps[i]
		}
	}
	if m == nil {
		return ""
	}
	// The mapping shows file offset m.Offset at m.Start; the PT_LOAD segment
	// holding that offset says which virtual address of the file that is.
	var bias uint64
	found := false
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		off := p.Off &^ (pageSize - 1)
		if m.Offset >= off && m.Offset < p.Off+p.Filesz {
			bias = m.Start - ((p.Vaddr &^ (pageSize - 1)) + (m.Offset - off))
			found = true
			break
		}
	}
	if !found {
		return ""
	}
	v := addr - bias
	best := ""
	var bestOff uint64
	for _, syms := range [][]elf.Symbol{symbols(f.Symbols), symbols(f.DynamicSymbols)} {
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || v < s.Value {
				continue
			}
			if v < s.Value+max(s.Size, 1) {
				best, bestOff = s.Name, v-s.Value
				break
			}
		}
		if best != "" {
			break
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("%s+%#x", best, bestOff)
}

func symbols(get func() ([]elf.Symbol, error)) []elf.Symbol {
	s, _ := get()
	return s
}

// buildID returns the hex of the GNU build-id note.
func buildID(f *elf.File) (string, bool) { return proc.BuildID(f) }
