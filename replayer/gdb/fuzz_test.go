package gdb

import "testing"

// FuzzPacket feeds arbitrary bytes to the framing and to the request parser:
// neither may panic, whatever GDB (or anything else on the socket) sends.
func FuzzPacket(f *testing.F) {
	for _, s := range []string{
		"$qSupported:multiprocess+;swbreak+;hwbreak+;qRelocInsn+#c9", "+$g#67", "$m7ffe0000,40#00",
		"$Z0,55c21284d1f9,1#00", "$vCont;s:p1.1;c#00", "$qXfer:features:read:target.xml:0,ffb#00",
		"$QCatchSyscalls:1;1;e7#00", "$qRcmd,7374617473#00", "\x03", "$}#00", "$X10,2:}]}##00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) > 0 {
			tok, n, _ := NextToken(b)
			if n == 0 {
				break
			}
			b = b[n:]
			if tok.Kind == '$' {
				r, _ := ParseRequest(tok.Payload)
				_, _ = Unescape(tok.Payload)
				if r.Op == OpInsert || r.Op == OpRemove {
					splitWatch(r.Addr, r.Len)
				}
				if r.Op == OpXferRead {
					xferChunk([]byte("data"), r.Addr, r.Len)
				}
			}
		}
	})
}
