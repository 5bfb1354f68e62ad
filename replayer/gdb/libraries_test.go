package gdb

import (
	"debug/elf"
	"os"
	"strings"
	"testing"

	"github.com/tprec/tprec/format"
)

func TestLibrariesFromMaps(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no %s on a Debian machine: %v", libc, err)
		}
		t.Skipf("no %s here: %v", libc, err)
	}
	var dyn uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			dyn = p.Vaddr
		}
	}
	f.Close()
	const base = 0x7f0000100000
	c := &format.Checkpoint{Header: format.Header{ExePath: "/srv/app"}}
	c.Intervals = []format.Interval{{Maps: []format.Mapping{
		{Start: 0x555555554000, End: 0x555555555000, Prot: 1, Path: "/srv/app"},
		{Start: 0x555555555000, End: 0x555555556000, Prot: 5, Offset: 0x1000, Path: "/srv/app"},
		{Start: base, End: base + 0x28000, Prot: 1, Path: libc},
		{Start: base + 0x28000, End: base + 0x17d000, Prot: 5, Offset: 0x28000, Path: libc},
		{Start: 0x7f0000400000, End: 0x7f0000401000, Prot: 1, Path: "/usr/share/locale/data"}, // not executable
		{Start: 0x7f0000500000, End: 0x7f0000501000, Prot: 5, Path: "[vdso]"},
	}}}
	libs := libraries(c)
	if len(libs) != 1 || libs[0].path != libc || libs[0].lAddr != base || libs[0].lLD != base+dyn {
		t.Fatalf("libraries: %+v (want %s at %#x, dynamic at %#x)", libs, libc, base, base+dyn)
	}
	doc := librariesSVR4(libs)
	if !strings.Contains(doc, `name="`+libc+`"`) || !strings.Contains(doc, `l_addr="0x7f0000100000"`) {
		t.Errorf("document:\n%s", doc)
	}
}

func TestModulesSVR4(t *testing.T) {
	doc := modulesSVR4([]format.Module{
		{LinkMap: 0x7ffff7ffe2e0, LAddr: 0x555555554000, LD: 0x555555557dc8, TLSModID: 1, TLSOffset: 0x10},
		{Name: "/lib/x86_64-linux-gnu/libc.so.6", LinkMap: 0x7ffff7fc1160, LAddr: 0x7ffff7d80000, LD: 0x7ffff7f9a9c0, TLSModID: 2, TLSOffset: 0x90},
	})
	for _, want := range []string{`main-lm="0x7ffff7ffe2e0"`, `name="/lib/x86_64-linux-gnu/libc.so.6" lm="0x7ffff7fc1160" l_addr="0x7ffff7d80000" l_ld="0x7ffff7f9a9c0"`} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %s:\n%s", want, doc)
		}
	}
	if strings.Count(doc, "<library ") != 1 {
		t.Errorf("the program itself is listed as a library:\n%s", doc)
	}
}

func TestThreadsXML(t *testing.T) {
	doc := threadsXML([]int{0x4d2, 0x4d3}, []format.ThreadName{{Tid: 0x4d3, Name: "mc-worker<1>"}})
	want := `<thread id="4d2"/>` + "\n" + `  <thread id="4d3" name="mc-worker&lt;1&gt;"/>`
	if !strings.Contains(doc, want) {
		t.Errorf("document:\n%s\nwant %s", doc, want)
	}
}
