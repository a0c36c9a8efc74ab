// A stand-in for libguestfs.org/libnbd, whose Go bindings the Go module proxy does not
// serve (403 for v1.25.2-5-g48df7c4d2b, the version kubevirt.io/kubevirt v1.8.4 pins).
// See libnbd.go.
module libguestfs.org/libnbd

go 1.24.0
