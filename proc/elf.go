package proc

import (
	"debug/elf"
	"encoding/hex"
)

// BuildID returns the hex of an ELF file's GNU build-id note (NT_GNU_BUILD_ID),
// and whether it has one. The recorder writes it into the checkpoint; the
// replayer and the gdb server use it to tell whether a binary on the replay
// machine is the recorded one.
func BuildID(f *elf.File) (string, bool) {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		for len(b) >= 12 {
			nsz := f.ByteOrder.Uint32(b[0:])
			dsz := f.ByteOrder.Uint32(b[4:])
			typ := f.ByteOrder.Uint32(b[8:])
			nEnd := 12 + (uint64(nsz)+3)&^3
			dEnd := nEnd + (uint64(dsz)+3)&^3
			if dEnd > uint64(len(b)) {
				break
			}
			if typ == 3 && nsz == 4 && string(b[12:15]) == "GNU" {
				return hex.EncodeToString(b[nEnd : nEnd+uint64(dsz)]), true
			}
			b = b[dEnd:]
		}
	}
	return "", false
}

// FileBuildID is BuildID of the ELF file at path ("" if none or unreadable).
func FileBuildID(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	id, _ := BuildID(f)
	return id
}
