package gdb

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/tprec/tprec/format"
)

// reg is one register of the target description, in 'g' packet order.
type reg struct {
	name    string
	bits    int
	typ     string
	group   string
	feature string
}

// The feature names GDB's amd64 Linux support looks for
// (gdb/features/i386/64bit-*.xml name them; GDB matches registers by name).
const (
	featCore     = "org.gnu.gdb.i386.core"
	featSSE      = "org.gnu.gdb.i386.sse"
	featLinux    = "org.gnu.gdb.i386.linux"
	featSegments = "org.gnu.gdb.i386.segments"
	featAVX      = "org.gnu.gdb.i386.avx"
)

// registers returns the register list, with the AVX upper halves when avx.
func registers(avx bool) []reg {
	var r []reg
	add := func(name string, bits int, typ, group, feat string) {
		r = append(r, reg{name, bits, typ, group, feat})
	}
	for _, n := range []string{"rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp",
		"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"} {
		t := "int64"
		if n == "rbp" || n == "rsp" {
			t = "data_ptr"
		}
		add(n, 64, t, "general", featCore)
	}
	add("rip", 64, "code_ptr", "general", featCore)
	add("eflags", 32, "i386_eflags", "general", featCore)
	for _, n := range []string{"cs", "ss", "ds", "es", "fs", "gs"} {
		add(n, 32, "int32", "general", featCore)
	}
	for i := 0; i < 8; i++ {
		add(fmt.Sprintf("st%d", i), 80, "i387_ext", "float", featCore)
	}
	for _, n := range []string{"fctrl", "fstat", "ftag", "fiseg", "fioff", "foseg", "fooff", "fop"} {
		add(n, 32, "int", "float", featCore)
	}
	for i := 0; i < 16; i++ {
		add(fmt.Sprintf("xmm%d", i), 128, "vec128", "vector", featSSE)
	}
	add("mxcsr", 32, "i386_mxcsr", "vector", featSSE)
	add("orig_rax", 64, "int", "system", featLinux)
	add("fs_base", 64, "int", "", featSegments)
	add("gs_base", 64, "int", "", featSegments)
	if avx {
		for i := 0; i < 16; i++ {
			add(fmt.Sprintf("ymm%dh", i), 128, "uint128", "", featAVX)
		}
	}
	return r
}

// targetXML is the target description: one document with every feature.
func targetXML(avx bool) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0"?>
<!DOCTYPE target SYSTEM "gdb-target.dtd">
<target version="1.0">
<architecture>i386:x86-64</architecture>
<osabi>GNU/Linux</osabi>
`)
	types := map[string]string{
		featCore: `<flags id="i386_eflags" size="4">
<field name="" start="22" end="31"/><field name="CF" start="0" end="0"/><field name="" start="1" end="1"/>
<field name="PF" start="2" end="2"/><field name="AF" start="4" end="4"/><field name="ZF" start="6" end="6"/>
<field name="SF" start="7" end="7"/><field name="TF" start="8" end="8"/><field name="IF" start="9" end="9"/>
<field name="DF" start="10" end="10"/><field name="OF" start="11" end="11"/><field name="NT" start="14" end="14"/>
<field name="RF" start="16" end="16"/><field name="VM" start="17" end="17"/><field name="AC" start="18" end="18"/>
<field name="VIF" start="19" end="19"/><field name="VIP" start="20" end="20"/><field name="ID" start="21" end="21"/>
</flags>
`,
		featSSE: `<vector id="v8bf16" type="bfloat16" count="8"/><vector id="v8h" type="ieee_half" count="8"/>
<vector id="v4f" type="ieee_single" count="4"/><vector id="v2d" type="ieee_double" count="2"/>
<vector id="v16i8" type="int8" count="16"/><vector id="v8i16" type="int16" count="8"/>
<vector id="v4i32" type="int32" count="4"/><vector id="v2i64" type="int64" count="2"/>
<union id="vec128"><field name="v8_bfloat16" type="v8bf16"/><field name="v8_half" type="v8h"/>
<field name="v4_float" type="v4f"/><field name="v2_double" type="v2d"/><field name="v16_int8" type="v16i8"/>
<field name="v8_int16" type="v8i16"/><field name="v4_int32" type="v4i32"/><field name="v2_int64" type="v2i64"/>
<field name="uint128" type="uint128"/></union>
<flags id="i386_mxcsr" size="4">
<field name="IE" start="0" end="0"/><field name="DE" start="1" end="1"/><field name="ZE" start="2" end="2"/>
<field name="OE" start="3" end="3"/><field name="UE" start="4" end="4"/><field name="PE" start="5" end="5"/>
<field name="DAZ" start="6" end="6"/><field name="IM" start="7" end="7"/><field name="DM" start="8" end="8"/>
<field name="ZM" start="9" end="9"/><field name="OM" start="10" end="10"/><field name="UM" start="11" end="11"/>
<field name="PM" start="12" end="12"/><field name="FZ" start="15" end="15"/>
</flags>
`,
	}
	cur := ""
	for i, r := range registers(avx) {
		if r.feature != cur {
			if cur != "" {
				b.WriteString("</feature>\n")
			}
			cur = r.feature
			fmt.Fprintf(&b, "<feature name=%q>\n", cur)
			b.WriteString(types[cur])
		}
		fmt.Fprintf(&b, `<reg name=%q bitsize="%d" type=%q regnum="%d"`, r.name, r.bits, r.typ, i)
		if r.group != "" {
			fmt.Fprintf(&b, " group=%q", r.group)
		}
		b.WriteString("/>\n")
	}
	b.WriteString("</feature>\n</target>\n")
	return b.String()
}

// XSAVE layout (Intel SDM vol. 1, 13.4 and 10.5.1: the legacy region is the
// FXSAVE image; the XSAVE header follows at 512; AVX state component 2 sits at
// offset 576 in the standard format the kernel's regset uses).
const (
	xsFCW        = 0
	xsFSW        = 2
	xsFTW        = 4 // abridged: one bit per register
	xsFOP        = 6
	xsFIP        = 8
	xsFDP        = 16
	xsMXCSR      = 24
	xsST         = 32
	xsXMM        = 160
	xsSWBytes    = 464 // struct _fpx_sw_bytes (arch/x86/include/uapi/asm/sigcontext.h)
	xsHeader     = 512 // XSTATE_BV
	xsYMMH       = 576
	fpxSWMagic1  = 0x46505853
	xfeatureX87  = 1 << 0
	xfeatureSSE  = 1 << 1
	xfeatureYMM  = 1 << 2
	xsaveMinSize = 512
)

// hasAVX reports whether an XSAVE image carries the AVX state component.
func hasAVX(x []byte) bool {
	if len(x) < xsYMMH+256 {
		return false
	}
	if binary.LittleEndian.Uint32(x[xsSWBytes:]) == fpxSWMagic1 {
		return binary.LittleEndian.Uint64(x[xsSWBytes+8:])&xfeatureYMM != 0
	}
	return true
}

// regBytes encodes register n (an index into registers) little-endian, from
// the general registers and the XSAVE image. Components the image holds in
// their initial state (XSTATE_BV bit clear) read as their initial values.
func regBytes(n int, g format.Regs, x []byte) []byte {
	le := binary.LittleEndian
	u64 := func(v uint64) []byte { return le.AppendUint64(nil, v) }
	u32 := func(v uint64) []byte { return le.AppendUint32(nil, uint32(v)) }
	var bv uint64 = xfeatureX87 | xfeatureSSE | xfeatureYMM
	if len(x) >= xsHeader+8 {
		bv = le.Uint64(x[xsHeader:])
	}
	if len(x) < xsaveMinSize {
		x = make([]byte, xsaveMinSize)
		bv = 0
	}
	x87 := bv&xfeatureX87 != 0
	sse := bv&xfeatureSSE != 0
	gen := []uint64{g.Rax, g.Rbx, g.Rcx, g.Rdx, g.Rsi, g.Rdi, g.Rbp, g.Rsp,
		g.R8, g.R9, g.R10, g.R11, g.R12, g.R13, g.R14, g.R15}
	switch {
	case n < 16:
		return u64(gen[n])
	case n == 16:
		return u64(g.Rip)
	case n == 17:
		return u32(g.Eflags)
	case n < 24:
		return u32([]uint64{g.Cs, g.Ss, g.Ds, g.Es, g.Fs, g.Gs}[n-18])
	case n < 32:
		if !x87 {
			return make([]byte, 10)
		}
		off := xsST + 16*(n-24)
		return append([]byte(nil), x[off:off+10]...)
	case n < 40:
		if !x87 {
			init := []uint64{0x37f, 0, 0xffff, 0, 0, 0, 0, 0}
			return u32(init[n-32])
		}
		switch n - 32 {
		case 0:
			return u32(uint64(le.Uint16(x[xsFCW:])))
		case 1:
			return u32(uint64(le.Uint16(x[xsFSW:])))
		case 2:
			return u32(uint64(fullTag(x)))
		case 3:
			return u32(0) // fiseg: the 64-bit FXSAVE format keeps no selector
		case 4:
			return u32(le.Uint64(x[xsFIP:]))
		case 5:
			return u32(0)
		case 6:
			return u32(le.Uint64(x[xsFDP:]))
		default:
			return u32(uint64(le.Uint16(x[xsFOP:]) & 0x7ff))
		}
	case n < 56:
		if !sse {
			return make([]byte, 16)
		}
		off := xsXMM + 16*(n-40)
		return append([]byte(nil), x[off:off+16]...)
	case n == 56:
		if !sse && bv&xfeatureYMM == 0 {
			return u32(0x1f80)
		}
		return u32(uint64(le.Uint32(x[xsMXCSR:])))
	case n == 57:
		return u64(g.OrigRax)
	case n == 58:
		return u64(g.FsBase)
	case n == 59:
		return u64(g.GsBase)
	case n < 76:
		if bv&xfeatureYMM == 0 || len(x) < xsYMMH+256 {
			return make([]byte, 16)
		}
		off := xsYMMH + 16*(n-60)
		return append([]byte(nil), x[off:off+16]...)
	}
	return nil
}

// fullTag expands FXSAVE's abridged tag byte into the x87 tag word GDB shows:
// two bits per physical register, 11 empty, else 00 valid, 01 zero, 10
// special, from the register's exponent and integer bit.
func fullTag(x []byte) uint16 {
	abridged := x[xsFTW]
	top := (binary.LittleEndian.Uint16(x[xsFSW:]) >> 11) & 7
	var tag uint16
	for phys := 0; phys < 8; phys++ {
		t := uint16(3)
		if abridged&(1<<phys) != 0 {
			st := (phys - int(top) + 8) & 7 // stack position of the physical register
			r := x[xsST+16*st:]
			exp := binary.LittleEndian.Uint16(r[8:]) & 0x7fff
			mant := binary.LittleEndian.Uint64(r[0:])
			switch {
			case exp == 0x7fff:
				t = 2
			case exp == 0 && mant == 0:
				t = 1
			case exp == 0 || mant>>63 == 0:
				t = 2
			default:
				t = 0
			}
		}
		tag |= t << (2 * phys)
	}
	return tag
}
