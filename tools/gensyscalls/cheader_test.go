package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/tprec/tprec/syscalls"
)

// The committed header is what the table generates now (make check-generate
// checks the same for every generated file; this runs with go test).
func TestCHeaderUpToDate(t *testing.T) {
	want, err := EmitCHeader(syscalls.All())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../bpf/syscall_table.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bpf/syscall_table.h is stale: run make generate")
	}
	again, _ := EmitCHeader(syscalls.All())
	if !bytes.Equal(again, want) {
		t.Fatal("the header is not deterministic")
	}
}
