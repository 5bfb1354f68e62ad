// Command deltas measures, on a checkpoint taken with --all-starts, what
// the recorder's ring pays for an original page stored whole (s2) and as a
// delta against the previous original of its address (internal/pagedelta):
// scripts/bench/deltas.sh records one and runs it.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/internal/pagedelta"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: deltas CHECKPOINT (taken with tprec --all-starts)")
		os.Exit(2)
	}
	f, err := format.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	last := map[uint64][]byte{}
	var whole, deltas, over, wholeBytes, deltaBytes int
	var wholeTime, deltaTime time.Duration
	dst := make([]byte, s2.MaxEncodedLen(format.PageSize))
	for _, iv := range f.Checkpoint.Intervals {
		for _, p := range iv.Written {
			if p.Hash == format.ZeroHash {
				continue
			}
			data, err := f.Page(p.Hash)
			if err != nil {
				continue
			}
			t0 := time.Now()
			wholeBytes += len(s2.Encode(dst, data))
			wholeTime += time.Since(t0)
			whole++
			if prev, ok := last[p.Addr]; ok {
				t0 := time.Now()
				d, ok := pagedelta.Append(dst[:0], data, prev, 1024)
				deltaTime += time.Since(t0)
				if ok {
					deltaBytes += len(d)
					deltas++
				} else {
					over++
				}
			}
			last[p.Addr] = data
		}
	}
	if whole == 0 || deltas+over == 0 {
		fmt.Fprintln(os.Stderr, "no originals with a previous one: was the checkpoint taken with --all-starts?")
		os.Exit(1)
	}
	fmt.Printf("originals %d: s2 %d bytes a page, %.2f us\n", whole, wholeBytes/whole, float64(wholeTime.Nanoseconds())/float64(whole)/1000)
	fmt.Printf("with a previous original %d: delta %d bytes a page (%d over 1 KB), %.2f us\n",
		deltas+over, deltaBytes/max(deltas, 1), over, float64(deltaTime.Nanoseconds())/float64(deltas+over)/1000)
}
