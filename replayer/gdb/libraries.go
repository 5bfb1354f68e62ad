package gdb

import (
	"debug/elf"
	"fmt"
	"html"
	"strings"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
)

// library is one shared object of the replayed process, as GDB's SVR4
// library list names it: lAddr is the difference between the addresses in
// the file and in memory, lLD the address of its dynamic section in memory.
type library struct {
	path  string
	lAddr uint64
	lLD   uint64
}

// libraries lists the shared objects of the recorded memory map: every file
// with an executable mapping, other than the program itself, placed by its
// mapping of file offset 0. GDB normally reads this list from the dynamic
// loader's r_debug and link_map in the program's memory, but a minimized
// checkpoint holds only the pages the window touched, which often leaves
// those out; then GDB finds no library and shows library code as `??`.
//
// The dynamic section's address comes from the file on this machine (GDB
// reads the same file for the symbols). A file that is not here keeps its
// mapping address as the bias and no dynamic section.
func libraries(c *format.Checkpoint) []library {
	if len(c.Intervals) == 0 {
		return nil
	}
	maps := c.Intervals[len(c.Intervals)-1].Maps
	exec := map[string]bool{}
	for _, m := range maps {
		if m.Prot&0x4 != 0 && strings.HasPrefix(m.Path, "/") && !strings.HasSuffix(m.Path, " (deleted)") && m.Path != c.Header.ExePath {
			exec[m.Path] = true
		}
	}
	var out []library
	seen := map[string]bool{}
	for _, m := range maps {
		if !exec[m.Path] || m.Offset != 0 || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		out = append(out, placeLibrary(m.Path, m.Start))
	}
	return out
}

// placeLibrary works out the load bias and dynamic section address of the
// file at path whose first page is mapped at start.
func placeLibrary(path string, start uint64) library {
	lib := library{path: path, lAddr: start}
	f, err := elf.Open(path)
	if err != nil {
		return lib
	}
	defer f.Close()
	lib.lAddr = start - proc.FirstLoad(f)
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			lib.lLD = lib.lAddr + p.Vaddr
		}
	}
	return lib
}

// librariesSVR4 is the qXfer:libraries-svr4:read document. The lm
// attributes (the link_map addresses) are left 0: the loader's own records
// may not be in the checkpoint, and GDB needs them only for thread-local
// storage lookups through libthread_db.
func librariesSVR4(libs []library) string {
	var b strings.Builder
	b.WriteString(`<library-list-svr4 version="1.0">` + "\n")
	for _, l := range libs {
		fmt.Fprintf(&b, `  <library name="%s" lm="0x0" l_addr="%#x" l_ld="%#x" lmid="0x0"/>`+"\n", html.EscapeString(l.path), l.lAddr, l.lLD)
	}
	b.WriteString("</library-list-svr4>\n")
	return b.String()
}

// modulesSVR4 is the qXfer:libraries-svr4:read document made from the
// loader's list recorded at the dump (format 4.2): the real link_map
// addresses, which GDB hands back in qGetTLSAddr, and main-lm for the
// program's own thread-local variables.
func modulesSVR4(mods []format.Module) string {
	var b strings.Builder
	b.WriteString(`<library-list-svr4 version="1.0"`)
	if mods[0].Name == "" {
		fmt.Fprintf(&b, ` main-lm="%#x"`, mods[0].LinkMap)
	}
	b.WriteString(">\n")
	for i, m := range mods {
		if i == 0 && m.Name == "" {
			continue
		}
		fmt.Fprintf(&b, `  <library name="%s" lm="%#x" l_addr="%#x" l_ld="%#x" lmid="0x0"/>`+"\n",
			html.EscapeString(m.Name), m.LinkMap, m.LAddr, m.LD)
	}
	b.WriteString("</library-list-svr4>\n")
	return b.String()
}
