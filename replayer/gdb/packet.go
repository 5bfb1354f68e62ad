// Package gdb serves a replay session (replayer.Session) to GDB over the GDB
// remote serial protocol: packet framing with checksums and acks (packet.go),
// the parsing of requests (command.go), the target description and register
// encoding for x86-64 Linux (target.go), and the server that answers requests
// by driving the session forward and backward (server.go).
//
// The debugging is read-only: the replayed execution is the recorded one, and
// writing registers or memory would leave it, so such requests are refused.
package gdb

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
)

// Sentinel errors of the protocol layer; ProtocolError wraps them with detail.
var (
	ErrChecksum  = errors.New("gdb: packet checksum mismatch")
	ErrMalformed = errors.New("gdb: malformed packet")
	ErrTooLong   = errors.New("gdb: packet too long")
)

// ProtocolError names the request (or framing step) that failed.
type ProtocolError struct {
	Op  string
	Err error
}

func (e *ProtocolError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *ProtocolError) Unwrap() error { return e.Err }

func protoErr(op string, err error, format string, args ...any) error {
	return &ProtocolError{Op: op, Err: fmt.Errorf("%w: "+format, append([]any{err}, args...)...)}
}

// MaxPacket is the packet size the server announces (PacketSize) and accepts.
const MaxPacket = 0x4000

// Checksum is the modulo-256 sum of the packet data between '$' and '#'.
func Checksum(data []byte) byte {
	var s byte
	for _, b := range data {
		s += b
	}
	return s
}

// Frame wraps data (already escaped where it holds binary) as $data#cc.
func Frame(data []byte) []byte {
	out := make([]byte, 0, len(data)+4)
	out = append(out, '$')
	out = append(out, data...)
	out = append(out, '#')
	return append(out, hexDigits[Checksum(data)>>4], hexDigits[Checksum(data)&0xf])
}

const hexDigits = "0123456789abcdef"

// Ack and Nack are the acknowledgment bytes of the protocol (not used after
// QStartNoAckMode).
const (
	Ack       = '+'
	Nack      = '-'
	Interrupt = 0x03
)

// Token is one unit read from the wire: a packet, an ack, a nack or an
// interrupt request.
type Token struct {
	Kind    byte   // '$' packet, Ack, Nack, Interrupt
	Payload []byte // packet data, unescaped of nothing (escapes are per request)
}

// NextToken reads the first token from buf and returns it with the bytes
// consumed. It returns n == 0 when buf does not hold a whole token yet. A
// packet with a wrong checksum is returned with ErrChecksum (the caller
// answers with a nack); bytes that start no token are skipped.
func NextToken(buf []byte) (tok Token, n int, err error) {
	for i := 0; i < len(buf); i++ {
		switch buf[i] {
		case Ack, Nack, Interrupt:
			return Token{Kind: buf[i]}, i + 1, nil
		case '$':
			end := bytes.IndexByte(buf[i+1:], '#')
			if end < 0 {
				if len(buf)-i > MaxPacket+4 {
					return Token{}, len(buf), protoErr("read packet", ErrTooLong, "%d bytes without '#'", len(buf)-i)
				}
				return Token{}, 0, nil
			}
			end += i + 1
			if len(buf) < end+3 {
				return Token{}, 0, nil
			}
			data := buf[i+1 : end]
			var sum [1]byte
			if _, herr := hex.Decode(sum[:], buf[end+1:end+3]); herr != nil {
				return Token{}, end + 3, protoErr("read packet", ErrMalformed, "checksum %q", buf[end+1:end+3])
			}
			if got := Checksum(data); got != sum[0] {
				return Token{}, end + 3, protoErr("read packet", ErrChecksum, "got %02x; expected %02x", sum[0], got)
			}
			return Token{Kind: '$', Payload: append([]byte(nil), data...)}, end + 3, nil
		}
	}
	return Token{}, len(buf), nil
}

// Escape escapes binary data for a reply: '#', '$', '}' and '*' become '}'
// followed by the byte xor 0x20.
func Escape(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		switch c {
		case '#', '$', '}', '*':
			out = append(out, '}', c^0x20)
		default:
			out = append(out, c)
		}
	}
	return out
}

// Unescape undoes Escape (for X packets and binary arguments).
func Unescape(b []byte) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '}' {
			if i+1 >= len(b) {
				return nil, protoErr("unescape", ErrMalformed, "trailing escape")
			}
			i++
			out = append(out, b[i]^0x20)
			continue
		}
		out = append(out, b[i])
	}
	return out, nil
}

// HexString encodes s as hex (O packets, qRcmd replies).
func HexString(s string) string { return hex.EncodeToString([]byte(s)) }
