package e2e

import (
	"flag"
	"strings"
	"testing"
)

// backendsFlag picks the recording backends the record/replay tests run
// against: the same test body runs once per backend, as a subtest named after
// it (go test ./tests/e2e -run 'TestGzipAttached/ebpf', or -backends ptrace).
var backendsFlag = flag.String("backends", "ebpf,ptrace", "comma-separated recording backends to test")

func forBackends(t *testing.T, body func(t *testing.T, backend string)) {
	t.Helper()
	for _, b := range strings.Split(*backendsFlag, ",") {
		b := strings.TrimSpace(b)
		if b == "" {
			continue
		}
		t.Run(b, func(t *testing.T) { body(t, b) })
	}
}
