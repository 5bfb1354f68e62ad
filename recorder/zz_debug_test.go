package recorder

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/tprec/tprec/bpf"
)

func TestLoadDebug(t *testing.T) {
	spec, _ := bpf.LoadTprec()
	spec.Maps["scratch"].MaxEntries = 2
	var objs bpf.TprecObjects
	err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats|ebpf.LogLevelBranch, LogSizeStart: 1 << 24}})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		n := len(ve.Log)
		for _, l := range ve.Log[max(0, n-60):] {
			fmt.Println(l)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	objs.Close()
}
