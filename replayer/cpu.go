package replayer

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/tprec/tprec/format"
	"golang.org/x/arch/x86/x86asm"
)

// isaPrefixes name the /proc/cpuinfo flags of instruction-set extensions that
// compiled code uses directly (often chosen at run time by ifunc resolvers,
// which the recording already resolved for the recording CPU). Flags that only
// describe the machine (hypervisor, tsc_known_freq...) do not matter to replay.
var isaPrefixes = []string{
	"avx", "fma", "f16c", "bmi", "adx", "sha", "aes", "vaes", "vpclmulqdq",
	"pclmulqdq", "gfni", "amx", "sse", "ssse3", "movbe", "popcnt", "abm",
	"lzcnt", "rdrand", "rdseed", "erms", "fsrm", "xsave", "clflushopt", "clwb",
	"movdir", "serialize", "rdpid", "fsgsbase",
	// TSX: glibc's string functions end in xtest where the CPU has RTM
	// (its *_rtm variants), and xtest faults on a CPU with neither. The
	// replay runs xtest on such a CPU (xtest.go), so CheckCPU leaves them
	// out; a SIGILL's hint names them (xbegin).
	"rtm", "hle",
}

// replayedAnyway are the extensions CheckCPU does not require: the replay
// does without them.
var replayedAnyway = []string{"rtm", "hle"}

// insnExtensions name, for instructions of an extension whose name is not
// theirs, the CPU flags of the extensions they need.
var insnExtensions = map[string][]string{
	"xtest":  {"rtm", "hle"},
	"xbegin": {"rtm"},
	"xend":   {"rtm"},
	"xabort": {"rtm"},
}

func isaFlag(f string) bool {
	for _, p := range isaPrefixes {
		if strings.HasPrefix(f, p) {
			return true
		}
	}
	return false
}

// localCPUFlags reads the flags of the first CPU in /proc/cpuinfo.
func localCPUFlags() (map[string]bool, error) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return nil, fmt.Errorf("read cpu flags: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "flags" {
			m := map[string]bool{}
			for _, fl := range strings.Fields(v) {
				m[fl] = true
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("read cpu flags: no flags line in /proc/cpuinfo")
}

// CheckCPU returns an error naming the instruction-set extensions the
// recording CPU had and this one lacks, but those the replay does without.
func CheckCPU(recorded []string) error {
	missing, err := missingISA(recorded)
	if err != nil {
		return err
	}
	missing = slices.DeleteFunc(missing, func(f string) bool { return slices.Contains(replayedAnyway, f) })
	if len(missing) > 0 {
		return &CPUError{Missing: missing}
	}
	return nil
}

// missingISA lists, sorted, the instruction-set extensions the recording CPU
// had (a checkpoint's CPU flags) and this one lacks, those CheckCPU lets
// pass too.
func missingISA(recorded []string) ([]string, error) {
	if len(recorded) == 0 {
		return nil, nil
	}
	here, err := localCPUFlags()
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range recorded {
		if isaFlag(f) && !here[f] {
			missing = append(missing, f)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// CPUError names the instruction-set extensions the recording CPU had and
// this one lacks.
type CPUError struct{ Missing []string }

func (e *CPUError) Error() string {
	return fmt.Sprintf("this CPU lacks %s, which the recording CPU had: the recorded code may use it (tpreplay --any-cpu replays anyway)", strings.Join(e.Missing, ", "))
}

// illegalHint explains a SIGILL the recording did not have, raised by the
// instruction whose first bytes are code: it names the instruction's kind
// (AVX-512 and AVX by their encodings, others by their decoded name) and,
// of missing (the extensions the recording CPU had and this one lacks:
// missingISA), those the instruction may belong to. The usual cause is a
// checkpoint recorded on a CPU with AVX-512 replayed on one without: glibc
// picks its string functions by the CPU it runs on, and the recorded
// process used those.
func illegalHint(code []byte, missing []string) string {
	kind, family := instructionKind(code)
	if kind == "" {
		kind = fmt.Sprintf("% x", code[:min(len(code), 8)])
	}
	if i := slices.IndexFunc(missing, func(f string) bool { return kind == f || kind == f+"64" }); i >= 0 {
		// An instruction named as its extension is (xsavec, which the
		// loader's lazy binding uses where the CPU has it; xsavec64).
		missing = missing[i : i+1]
	} else if need, ok := insnExtensions[kind]; ok {
		missing = slices.DeleteFunc(slices.Clone(missing), func(f string) bool { return !slices.Contains(need, f) })
	} else if family != nil {
		missing = slices.DeleteFunc(slices.Clone(missing), func(f string) bool {
			return !slices.ContainsFunc(family, func(p string) bool { return strings.HasPrefix(f, p) })
		})
	}
	if len(missing) == 0 {
		return "the instruction is " + kind
	}
	return fmt.Sprintf("the instruction is %s, and this CPU lacks %s, which the recording CPU had: replay on a CPU with them", kind, strings.Join(missing, ", "))
}

// instructionKind names the x86-64 instruction whose first bytes are code,
// or is empty when it cannot tell. family lists the prefixes of the CPU
// flags of the extensions its encoding belongs to, nil when any may.
func instructionKind(code []byte) (kind string, family []string) {
	i := 0
	for i < len(code) && legacyPrefix(code[i]) {
		i++
	}
	if i == len(code) {
		return "", nil
	}
	switch code[i] {
	case 0x62: // not BOUND in 64-bit mode: always EVEX
		return "an AVX-512 one (EVEX-encoded)", []string{"avx512"}
	case 0xc4, 0xc5: // not LES/LDS in 64-bit mode: always VEX
		return "an AVX one (VEX-encoded)", []string{"avx", "fma", "f16c", "bmi", "vaes", "vpclmulqdq", "gfni"}
	}
	inst, err := x86asm.Decode(code, 64)
	if err != nil || inst.Op == 0 {
		return "", nil
	}
	return strings.ToLower(inst.Op.String()), nil
}

// legacyPrefix reports whether b is an x86 legacy prefix (operand and
// address size, segment, lock, rep) or a REX prefix.
func legacyPrefix(b byte) bool {
	switch b {
	case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3:
		return true
	}
	return b&0xf0 == 0x40
}

// xsaveNames name the XSAVE components a program's own code uses.
var xsaveNames = []struct {
	bits uint64
	name string
}{{1 << 2, "AVX"}, {7 << 5, "AVX-512"}, {1 << 9, "protection keys"}, {3 << 17, "AMX"}}

// xsaveHint explains a divergence where this CPU saves register state the
// recording CPU did not (recorded: the file's layout of the recording CPU's
// components; empty in files older than 7.2, which say nothing): code that
// sizes an XSAVE area by CPUID wrote more here than in the recording. The
// dynamic loader binding a function on its first call does so on the stack
// (a python3 recorded under qemu and replayed on a CPU with AVX-512).
func xsaveHint(recorded []format.XComponent, local uint64) string {
	if len(recorded) == 0 {
		return ""
	}
	had := uint64(xsaveLegacy)
	for _, c := range recorded {
		had |= 1 << c.Index
	}
	var more []string
	for _, n := range xsaveNames {
		if local&n.bits&^had != 0 {
			more = append(more, n.name)
		}
	}
	if len(more) == 0 {
		return ""
	}
	return fmt.Sprintf("this CPU saves %s state, which the recording CPU did not: where the recorded program saved registers with xsave into an area sized for that CPU (the loader binding a function lazily), it wrote more here; record with LD_BIND_NOW=1, or replay on a CPU like the recording one", strings.Join(more, " and "))
}

// xsaveLegacy: x87 and SSE, which every image holds.
const xsaveLegacy = 3
