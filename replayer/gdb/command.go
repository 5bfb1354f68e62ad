package gdb

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
)

// ErrUnsupported marks a request the server does not implement; the reply is
// the empty packet, which tells GDB so.
var ErrUnsupported = errors.New("gdb: unsupported request")

// Op is the kind of a parsed request.
type Op int

// Requests the server knows.
const (
	OpUnknown        Op = iota
	OpHaltReason        // ?
	OpReadRegs          // g
	OpReadReg           // p n
	OpWrite             // G, P, M, X: refused, the replay is read-only
	OpReadMem           // m addr,len
	OpReadMemBin        // x addr,len
	OpInsert            // Z type,addr,kind
	OpRemove            // z type,addr,kind
	OpStep              // s, S, vCont;s
	OpContinue          // c, C, vCont;c
	OpStop              // vCont;t
	OpReverseStep       // bs
	OpReverseCont       // bc
	OpVContQuery        // vCont?
	OpSetThread         // H
	OpThreadAlive       // T
	OpCurrentThread     // qC
	OpThreadsFirst      // qfThreadInfo
	OpThreadsNext       // qsThreadInfo
	OpSupported         // qSupported
	OpNoAck             // QStartNoAckMode
	OpXferRead          // qXfer:object:read:annex:off,len
	OpCatchSyscalls     // QCatchSyscalls
	OpAttached          // qAttached
	OpOffsets           // qOffsets
	OpSymbol            // qSymbol
	OpKill              // k, vKill
	OpDetach            // D
	OpMonitor           // qRcmd,hex
	OpMustReplyEmpty    // vMustReplyEmpty
	OpTLSAddr           // qGetTLSAddr:thread,offset,lm
)

// Request is one parsed request.
type Request struct {
	Op     Op
	Addr   uint64
	Len    int
	N      int    // register number, breakpoint type, or signal
	Object string // qXfer object ("features", "auxv"...)
	Annex  string
	Text   string // qRcmd command, decoded
	On     bool   // QCatchSyscalls
	Nrs    []int  // QCatchSyscalls numbers (none: all)
	// Thread of H and T: a thread id, 0 for any, -1 for all; Which is the
	// operation H selects it for ('g': registers, 'c': resuming).
	Thread int
	Which  byte
	// LM is the link_map address of qGetTLSAddr (Addr holds its offset).
	LM  uint64
	Raw string
}

// ParseRequest parses the data of one packet. Requests it does not know come
// back with Op == OpUnknown and ErrUnsupported; malformed ones with an error
// wrapping ErrMalformed.
func ParseRequest(p []byte) (Request, error) {
	r := Request{Raw: string(p)}
	if len(p) == 0 {
		return r, ErrUnsupported
	}
	bad := func(what string) (Request, error) {
		return r, protoErr("parse "+firstWord(p), ErrMalformed, "%s in %q", what, truncate(p))
	}
	s := string(p)
	switch p[0] {
	case '?':
		r.Op = OpHaltReason
		return r, nil
	case 'g':
		if len(p) == 1 {
			r.Op = OpReadRegs
			return r, nil
		}
	case 'p':
		n, err := strconv.ParseUint(s[1:], 16, 16)
		if err != nil {
			return bad("register number")
		}
		r.Op, r.N = OpReadReg, int(n)
		return r, nil
	case 'G', 'P', 'M', 'X':
		r.Op = OpWrite
		return r, nil
	case 'm', 'x':
		a, l, ok := addrLen(s[1:])
		if !ok {
			return bad("address,length")
		}
		r.Op, r.Addr, r.Len = OpReadMem, a, l
		if p[0] == 'x' {
			r.Op = OpReadMemBin
		}
		return r, nil
	case 'Z', 'z':
		parts := strings.Split(s[1:], ",")
		if len(parts) < 3 {
			return bad("type,address,kind")
		}
		t, err1 := strconv.ParseUint(parts[0], 16, 8)
		a, err2 := strconv.ParseUint(parts[1], 16, 64)
		k, err3 := strconv.ParseUint(strings.SplitN(parts[2], ";", 2)[0], 16, 16)
		if err1 != nil || err2 != nil || err3 != nil {
			return bad("type,address,kind")
		}
		r.Op, r.N, r.Addr, r.Len = OpInsert, int(t), a, int(k)
		if p[0] == 'z' {
			r.Op = OpRemove
		}
		return r, nil
	case 's', 'S':
		r.Op = OpStep
		return r, nil
	case 'c', 'C':
		r.Op = OpContinue
		return r, nil
	case 'b':
		switch s {
		case "bs":
			r.Op = OpReverseStep
			return r, nil
		case "bc":
			r.Op = OpReverseCont
			return r, nil
		}
	case 'H':
		if len(p) < 3 {
			return bad("thread")
		}
		t, ok := threadID(s[2:])
		if !ok {
			return bad("thread")
		}
		r.Op, r.Which, r.Thread = OpSetThread, p[1], t
		return r, nil
	case 'T':
		t, ok := threadID(s[1:])
		if !ok {
			return bad("thread")
		}
		r.Op, r.Thread = OpThreadAlive, t
		return r, nil
	case 'k':
		r.Op = OpKill
		return r, nil
	case 'D':
		r.Op = OpDetach
		return r, nil
	}
	switch {
	case s == "vCont?":
		r.Op = OpVContQuery
		return r, nil
	case strings.HasPrefix(s, "vCont;"):
		// The server has one thread: the first action decides.
		act := strings.SplitN(s[len("vCont;"):], ";", 2)[0]
		act = strings.SplitN(act, ":", 2)[0]
		if act == "" {
			return bad("action")
		}
		switch act[0] {
		case 'c', 'C':
			r.Op = OpContinue
		case 's', 'S':
			r.Op = OpStep
		case 't':
			r.Op = OpStop
		case 'r':
			r.Op = OpStep // range stepping is not announced; treat as a step
		default:
			return bad("action")
		}
		return r, nil
	case s == "vKill" || strings.HasPrefix(s, "vKill;"):
		r.Op = OpKill
		return r, nil
	case s == "vMustReplyEmpty":
		r.Op = OpMustReplyEmpty
		return r, nil
	case s == "qC":
		r.Op = OpCurrentThread
		return r, nil
	case s == "qfThreadInfo":
		r.Op = OpThreadsFirst
		return r, nil
	case s == "qsThreadInfo":
		r.Op = OpThreadsNext
		return r, nil
	case s == "qSupported" || strings.HasPrefix(s, "qSupported:"):
		r.Op = OpSupported
		return r, nil
	case s == "QStartNoAckMode":
		r.Op = OpNoAck
		return r, nil
	case s == "qAttached" || strings.HasPrefix(s, "qAttached:"):
		r.Op = OpAttached
		return r, nil
	case s == "qOffsets":
		r.Op = OpOffsets
		return r, nil
	case strings.HasPrefix(s, "qSymbol:"):
		r.Op = OpSymbol
		return r, nil
	case strings.HasPrefix(s, "qGetTLSAddr:"):
		f := strings.Split(s[len("qGetTLSAddr:"):], ",")
		if len(f) != 3 {
			return bad("thread,offset,lm")
		}
		t, ok := threadID(f[0])
		off, err1 := strconv.ParseUint(f[1], 16, 64)
		lm, err2 := strconv.ParseUint(f[2], 16, 64)
		if !ok || err1 != nil || err2 != nil {
			return bad("thread,offset,lm")
		}
		r.Op, r.Thread, r.Addr, r.LM = OpTLSAddr, t, off, lm
		return r, nil
	case strings.HasPrefix(s, "qRcmd,"):
		b, err := hexDecode(s[len("qRcmd,"):])
		if err != nil {
			return bad("command")
		}
		r.Op, r.Text = OpMonitor, string(b)
		return r, nil
	case strings.HasPrefix(s, "QCatchSyscalls:"):
		rest := s[len("QCatchSyscalls:"):]
		fields := strings.Split(rest, ";")
		switch fields[0] {
		case "0":
			r.Op = OpCatchSyscalls
			return r, nil
		case "1":
		default:
			return bad("flag")
		}
		r.Op, r.On = OpCatchSyscalls, true
		for _, f := range fields[1:] {
			n, err := strconv.ParseUint(f, 16, 32)
			if err != nil {
				return bad("syscall number")
			}
			r.Nrs = append(r.Nrs, int(n))
		}
		return r, nil
	case strings.HasPrefix(s, "qXfer:"):
		// qXfer:object:read:annex:offset,length
		f := strings.SplitN(s[len("qXfer:"):], ":", 4)
		if len(f) != 4 {
			return bad("qXfer fields")
		}
		if f[1] != "read" {
			r.Op = OpWrite
			return r, nil
		}
		a, l, ok := addrLen(f[3])
		if !ok {
			return bad("offset,length")
		}
		r.Op, r.Object, r.Annex, r.Addr, r.Len = OpXferRead, f[0], f[2], a, l
		return r, nil
	}
	return r, ErrUnsupported
}

// addrLen parses "addr,length" in hex.
func addrLen(s string) (uint64, int, bool) {
	a, l, ok := strings.Cut(s, ",")
	if !ok {
		return 0, 0, false
	}
	addr, err1 := strconv.ParseUint(a, 16, 64)
	n, err2 := strconv.ParseUint(l, 16, 31)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return addr, int(n), true
}

func hexDecode(s string) ([]byte, error) {
	out := make([]byte, len(s)/2)
	if len(s)%2 != 0 {
		return nil, ErrMalformed
	}
	for i := range out {
		v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, ErrMalformed
		}
		out[i] = byte(v)
	}
	return out, nil
}

func firstWord(p []byte) string {
	if i := bytes.IndexAny(p, ":;,"); i > 0 && i < 24 {
		return string(p[:i])
	}
	if len(p) > 1 {
		return string(p[:1])
	}
	return string(p)
}

func truncate(p []byte) string {
	if len(p) > 64 {
		return string(p[:64]) + "..."
	}
	return string(p)
}

// threadID parses a thread id of the protocol: hex, or -1 for all.
func threadID(s string) (int, bool) {
	if s == "-1" {
		return -1, true
	}
	n, err := strconv.ParseUint(s, 16, 31)
	return int(n), err == nil
}
