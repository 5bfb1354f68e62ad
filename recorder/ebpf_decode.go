package recorder

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tprec/tprec/bpf"
)

// Decoding of the eBPF ring buffer records (bpf/tprec.h). Every record
// starts with a type byte, dispatched through recordDecoders; every read of
// record bytes is preceded by a length check, and a malformed record is an
// error, never a panic (FuzzDecodeRecord). The header structs are the types
// bpf2go generates from the C ones; ebpf_layout_test.go checks their layout
// against the object's BTF.

// errRecord wraps every decoding error.
var errRecord = errors.New("ebpf record")

// Sizes of the C structs, from the generated Go types.
var (
	sizeSyscall = sizeOf[bpf.TprecTpSyscall]()
	sizePart    = sizeOf[bpf.TprecTpPart]()
	sizeItem    = sizeOf[bpf.TprecTpItem]()
	sizeFault   = sizeOf[bpf.TprecTpFault]()
)

// restartItemLen is the payload of TP_ITEM_RESTART: nr and six arguments.
const restartItemLen = 7 * 8

// item is one piece of a syscall record: memory the call wrote, or a note
// about memory that is missing.
type item struct {
	kind bpf.TprecTpItemKind
	addr uint64
	len  uint32
	data []byte // TP_ITEM_MEM and TP_ITEM_RESTART only
}

// record is one decoded ring buffer record: exactly one of its pointers is
// set. They point into the record's own storage, so that a reader decoding
// into the same record for every sample allocates nothing per record.
type record struct {
	syscall *bpf.TprecTpSyscall
	part    *bpf.TprecTpPart
	fault   *bpf.TprecTpFault
	items   []item

	sysv   bpf.TprecTpSyscall
	partv  bpf.TprecTpPart
	faultv bpf.TprecTpFault
}

// recordDecoders dispatches on the type byte (enum tp_event_type).
var recordDecoders = [...]func(r *record, b []byte) error{
	bpf.TprecTpEventTypeTP_EV_SYSCALL: (*record).decodeSyscall,
	bpf.TprecTpEventTypeTP_EV_PART:    (*record).decodePart,
	bpf.TprecTpEventTypeTP_EV_FAULT:   (*record).decodeFault,
}

// decodeRecord decodes one record. Item data aliases b.
func decodeRecord(b []byte) (record, error) {
	r := new(record)
	err := r.decode(b)
	return *r, err
}

// decode decodes b into r, reusing r's storage. Item data aliases b.
func (r *record) decode(b []byte) error {
	r.syscall, r.part, r.fault, r.items = nil, nil, nil, r.items[:0]
	if len(b) < 1 {
		return fmt.Errorf("%w: empty", errRecord)
	}
	if int(b[0]) >= len(recordDecoders) || recordDecoders[b[0]] == nil {
		return fmt.Errorf("%w: unknown type %d", errRecord, b[0])
	}
	return recordDecoders[b[0]](r, b)
}

func (r *record) decodeSyscall(b []byte) error {
	if len(b) < sizeSyscall {
		return fmt.Errorf("%w: syscall header: %d bytes, want %d", errRecord, len(b), sizeSyscall)
	}
	fromBytes(&r.sysv, b[:sizeSyscall])
	r.syscall = &r.sysv
	var err error
	r.items, err = decodeItems(r.items, b[sizeSyscall:])
	return err
}

func (r *record) decodePart(b []byte) error {
	if len(b) < sizePart {
		return fmt.Errorf("%w: part header: %d bytes, want %d", errRecord, len(b), sizePart)
	}
	fromBytes(&r.partv, b[:sizePart])
	r.part = &r.partv
	var err error
	r.items, err = decodeItems(r.items, b[sizePart:])
	return err
}

func (r *record) decodeFault(b []byte) error {
	if len(b) < sizeFault {
		return fmt.Errorf("%w: fault: %d bytes, want %d", errRecord, len(b), sizeFault)
	}
	fromBytes(&r.faultv, b[:sizeFault])
	r.fault = &r.faultv
	return nil
}

// decodeItems appends to items the items that fill the rest of a record.
// The ring buffer pads records to 8 bytes; trailing bytes shorter than an
// item header are that padding.
func decodeItems(items []item, b []byte) ([]item, error) {
	for len(b) >= sizeItem {
		var h bpf.TprecTpItem
		fromBytes(&h, b[:sizeItem])
		b = b[sizeItem:]
		it := item{kind: bpf.TprecTpItemKind(h.Kind), addr: h.Addr, len: h.Len}
		switch it.kind {
		case bpf.TprecTpItemKindTP_ITEM_MEM, bpf.TprecTpItemKindTP_ITEM_RESTART:
			n := uint64(h.Len)
			if it.kind == bpf.TprecTpItemKindTP_ITEM_RESTART && n != restartItemLen {
				return items, fmt.Errorf("%w: restart item of %d bytes", errRecord, n)
			}
			if n > uint64(len(b)) {
				return items, fmt.Errorf("%w: item of %d bytes at %#x, %d left", errRecord, n, h.Addr, len(b))
			}
			if h.Addr+n < h.Addr {
				return items, fmt.Errorf("%w: item at %#x+%d wraps around", errRecord, h.Addr, n)
			}
			it.data = b[:n]
			pad := (n + 7) &^ 7
			if pad > uint64(len(b)) {
				pad = uint64(len(b))
			}
			b = b[pad:]
		case bpf.TprecTpItemKindTP_ITEM_UNREADABLE, bpf.TprecTpItemKindTP_ITEM_TOOBIG, bpf.TprecTpItemKindTP_ITEM_UNSUPPORTED:
		case 0:
			// Zero padding after the last item.
			return items, nil
		default:
			return items, fmt.Errorf("%w: unknown item kind %d", errRecord, h.Kind)
		}
		items = append(items, it)
	}
	return items, nil
}

// restartOf decodes a TP_ITEM_RESTART payload.
func restartOf(it item) (nr int, args [6]uint64) {
	nr = int(int64(binary.LittleEndian.Uint64(it.data)))
	for i := range args {
		args[i] = binary.LittleEndian.Uint64(it.data[8+8*i:])
	}
	return nr, args
}
