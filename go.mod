module github.com/tprec/tprec

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/klauspost/compress v1.18.0
	github.com/pierrec/lz4/v4 v4.1.33
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/arch v0.33.0
	golang.org/x/net v0.48.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
