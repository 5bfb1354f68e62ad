package recorder

import "unsafe"

// sizeOf is the size of a generated C struct mirror. The bpf2go types carry
// structs.HostLayout, so the Go layout is the C one (checked against BTF in
// ebpf_layout_test.go).
func sizeOf[T any]() int {
	var v T
	return int(unsafe.Sizeof(v))
}

// fromBytes fills *v with the first sizeof(T) bytes of b. The caller has
// checked len(b) >= sizeof(T); b need not be aligned (copy is bytewise).
func fromBytes[T any](v *T, b []byte) {
	n := int(unsafe.Sizeof(*v))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(v)), n), b[:n])
}

// asBytes is the memory of *v, for writing a struct into a map.
func asBytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), int(unsafe.Sizeof(*v)))
}
