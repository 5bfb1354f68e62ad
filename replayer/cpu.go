package replayer

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
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
// recording CPU had and this one lacks.
func CheckCPU(recorded []string) error {
	if len(recorded) == 0 {
		return nil
	}
	here, err := localCPUFlags()
	if err != nil {
		return err
	}
	var missing []string
	for _, f := range recorded {
		if isaFlag(f) && !here[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return &CPUError{Missing: missing}
	}
	return nil
}

// CPUError names the instruction-set extensions the recording CPU had and
// this one lacks.
type CPUError struct{ Missing []string }

func (e *CPUError) Error() string {
	return fmt.Sprintf("this CPU lacks %s, which the recording CPU had: the recorded code may use it (tpreplay --any-cpu replays anyway)", strings.Join(e.Missing, ", "))
}
