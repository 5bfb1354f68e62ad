package syscalls

//go:generate go run ../tools/gensyscalls

import "strconv"

// Name returns the kernel name of any x86-64 syscall number, declared in the
// table or not, and "syscall_N" for a number the kernel does not define.
func Name(nr int) string {
	if nr >= 0 && nr <= maxSysnum && sysnames[nr] != "" {
		return sysnames[nr]
	}
	return "syscall_" + strconv.Itoa(nr)
}
