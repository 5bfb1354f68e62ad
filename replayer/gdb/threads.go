package gdb

import (
	"fmt"
	"html"
	"strings"

	"github.com/tprec/tprec/format"
)

// threadsXML is the qXfer:threads:read document: the replay's threads, in
// the order qfThreadInfo gives them, with the names they had at the dump.
func threadsXML(tids []int, names []format.ThreadName) string {
	byTid := map[int]string{}
	for _, n := range names {
		byTid[n.Tid] = n.Name
	}
	var b strings.Builder
	b.WriteString("<?xml version=\"1.0\"?>\n<threads>\n")
	for _, t := range tids {
		fmt.Fprintf(&b, `  <thread id="%x"`, t)
		if n, ok := byTid[t]; ok {
			fmt.Fprintf(&b, ` name="%s"`, html.EscapeString(n))
		}
		b.WriteString("/>\n")
	}
	b.WriteString("</threads>\n")
	return b.String()
}
