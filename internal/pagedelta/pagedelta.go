// Package pagedelta encodes a page as the 8-byte words in which it differs
// from another page of the same size: the recorder's ring stores a page a
// program rewrote in a few words that way, against its previous original.
package pagedelta

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// Append appends to dst the words in which page differs from base, each as
// the uvarint number of equal words before it and the word XOR its base
// word, and reports whether the delta stayed within max bytes (dst is then
// returned as it was). page and base have the same length, a multiple of 8.
func Append(dst, page, base []byte, max int) ([]byte, bool) {
	return appendDelta(dst, page, base, max, true)
}

// appendDelta is Append; without skip it compares word by word only (the
// tests' reference).
func appendDelta(dst, page, base []byte, max int, skip bool) ([]byte, bool) {
	start, gap := len(dst), uint64(0)
	for i := 0; i+8 <= len(page); i += 8 {
		// Most of a page a program rewrote in a few words is equal: a
		// block at a time with bytes.Equal (vector compares) skips it
		// four times faster than word by word (BenchmarkAppendFewWords).
		for skip && i%block == 0 && i+block <= len(page) && bytes.Equal(page[i:i+block], base[i:i+block]) {
			gap += block / 8
			i += block
		}
		if i+8 > len(page) {
			break
		}
		x := binary.LittleEndian.Uint64(page[i:]) ^ binary.LittleEndian.Uint64(base[i:])
		if x == 0 {
			gap++
			continue
		}
		dst = binary.AppendUvarint(dst, gap)
		dst = binary.LittleEndian.AppendUint64(dst, x)
		gap = 0
		if len(dst)-start > max {
			return dst[:start], false
		}
	}
	return dst, true
}

// block is the stretch Append compares at once.
const block = 128

// Apply applies a delta of Append to page, in place.
func Apply(page, d []byte) error {
	w, words := 0, len(page)/8
	for len(d) > 0 {
		gap, n := binary.Uvarint(d)
		if n <= 0 || len(d) < n+8 || gap >= uint64(words-w) {
			return errors.New("damaged page delta")
		}
		w += int(gap)
		x := binary.LittleEndian.Uint64(d[n:])
		binary.LittleEndian.PutUint64(page[8*w:], binary.LittleEndian.Uint64(page[8*w:])^x)
		w++
		d = d[n+8:]
	}
	return nil
}
