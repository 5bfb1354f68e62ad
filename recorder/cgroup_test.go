package recorder

import (
	"os"
	"path/filepath"
	"testing"
)

// A shadow leaves a limited pids cgroup, except in a cgroup v2 hierarchy
// where the target also has a memory limit: there the move would take the
// shadow out of reach of the memory cgroup's OOM killer.
func TestShadowPidsCgroup(t *testing.T) {
	v1 := "9:name=systemd:/\n8:pids:/box\n4:memory:/box\n0::/\n"
	v2 := "0::/system.slice/app.service\n"
	for _, c := range []struct {
		name, cgroups string
		files         map[string]string
		want          string
	}{
		{"v1 unlimited", v1, map[string]string{"pids/box/pids.max": "max"}, ""},
		{"v1 limited", v1, map[string]string{"pids/box/pids.max": "8", "memory/box/memory.limit_in_bytes": "1000000"}, "pids/cgroup.procs"},
		{"v1 limited above", "8:pids:/box/inner\n", map[string]string{"pids/box/pids.max": "8", "pids/box/inner/pids.max": "max"}, "pids/cgroup.procs"},
		{"v2 limited", v2, map[string]string{"cgroup.controllers": "cpu memory pids", "system.slice/app.service/pids.max": "4915", "system.slice/app.service/memory.max": "max", "system.slice/pids.max": "max"}, "cgroup.procs"},
		{"v2 limited, memory too", v2, map[string]string{"cgroup.controllers": "cpu memory pids", "system.slice/app.service/pids.max": "4915", "system.slice/memory.max": "1073741824"}, ""},
		{"v2 without pids", v2, map[string]string{"cgroup.controllers": "cpu memory", "system.slice/app.service/pids.max": "4915"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sysfs := t.TempDir()
			for f, s := range c.files {
				writeFile(t, filepath.Join(sysfs, f), s)
			}
			want := c.want
			if want != "" {
				want = filepath.Join(sysfs, want)
			}
			if got := shadowPidsCgroupIn(c.cgroups, sysfs); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

// The room a shadow may use is the least limit-minus-usage over the
// target's memory cgroup and those above it, in either hierarchy; no limit
// anywhere is no check.
func TestMemoryRoom(t *testing.T) {
	const unlimitedV1 = "9223372036854771712"
	for _, c := range []struct {
		name, cgroups string
		files         map[string]string
		room          int64
		limited       bool
	}{
		{"v1 unlimited", "4:memory:/box\n", map[string]string{"memory/box/memory.limit_in_bytes": unlimitedV1, "memory/box/memory.usage_in_bytes": "1000"}, 0, false},
		{"v1 limited", "4:memory:/box\n", map[string]string{"memory/box/memory.limit_in_bytes": "300000", "memory/box/memory.usage_in_bytes": "200000"}, 100000, true},
		{"v1 limited above", "4:memory:/box/inner\n", map[string]string{
			"memory/box/memory.limit_in_bytes": "500000", "memory/box/memory.usage_in_bytes": "450000",
			"memory/box/inner/memory.limit_in_bytes": unlimitedV1, "memory/box/inner/memory.usage_in_bytes": "400000"}, 50000, true},
		{"v1 over its limit", "4:memory:/box\n", map[string]string{"memory/box/memory.limit_in_bytes": "1000", "memory/box/memory.usage_in_bytes": "2000"}, 0, true},
		{"v2", "0::/system.slice/app.service\n", map[string]string{"cgroup.controllers": "cpu memory pids",
			"system.slice/app.service/memory.max": "max", "system.slice/app.service/memory.current": "5000",
			"system.slice/memory.max": "9000", "system.slice/memory.current": "6000"}, 3000, true},
		{"v2 without memory", "0::/a\n", map[string]string{"cgroup.controllers": "cpu pids", "a/memory.max": "10"}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			sysfs := t.TempDir()
			for f, s := range c.files {
				writeFile(t, filepath.Join(sysfs, f), s)
			}
			dirs, v2 := memoryCgroup(c.cgroups, sysfs)
			room, limited := memoryRoom(dirs, v2)
			if room != c.room || limited != c.limited {
				t.Errorf("room %d, limited %v; want %d, %v (dirs %v)", room, limited, c.room, c.limited, dirs)
			}
		})
	}
}

// writeFile writes s into path, making its directories.
func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
