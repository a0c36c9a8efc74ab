// Package libnbd stands in for libnbd's Go bindings in the local e2e cluster's
// virt-launcher (docs/dev/e2e.md, stage 3). The Go module proxy does not serve
// libguestfs.org/libnbd, and virt-launcher imports it only for KubeVirt's
// changed-block-tracking backups (pkg/virt-launcher/virtwrap/storage/nbd_client.go),
// which isochron's VMs do not use. It has exactly the API that file uses, and Create
// fails, so a backup fails loudly instead of doing anything wrong.
package libnbd

import "errors"

// Meta contexts and extent flags, with libnbd's values.
const (
	CONTEXT_BASE_ALLOCATION   = "base:allocation"
	CONTEXT_QEMU_DIRTY_BITMAP = "qemu:dirty-bitmap:"

	STATE_HOLE  = uint32(1)
	STATE_ZERO  = uint32(2)
	STATE_DIRTY = uint32(1)
)

// ErrUnavailable is what every call returns.
var ErrUnavailable = errors.New("libnbd is not built into this virt-launcher (isochron e2e-local stand-in): KubeVirt backups are unsupported here")

// LibnbdExtent is one extent of a block-status reply.
type LibnbdExtent struct {
	Length uint64
	Flags  uint64
}

// Libnbd is a handle; none can be created.
type Libnbd struct{}

// ExtentCallback64 receives extents from BlockStatus64.
type ExtentCallback64 func(metacontext string, offset uint64, entries []LibnbdExtent, err *int) int

// BlockStatus64Optargs and PreadOptargs are the calls' optional arguments.
type (
	BlockStatus64Optargs struct{}
	PreadOptargs         struct{}
)

// Create always fails with ErrUnavailable.
func Create() (*Libnbd, error) { return nil, ErrUnavailable }

func (*Libnbd) Close() error                              { return nil }
func (*Libnbd) AddMetaContext(string) error               { return ErrUnavailable }
func (*Libnbd) CanMetaContext(string) (bool, error)       { return false, ErrUnavailable }
func (*Libnbd) GetSize() (uint64, error)                  { return 0, ErrUnavailable }
func (*Libnbd) SetExportName(string) error                { return ErrUnavailable }
func (*Libnbd) ConnectUnix(string) error                  { return ErrUnavailable }
func (*Libnbd) Pread([]byte, uint64, *PreadOptargs) error { return ErrUnavailable }
func (*Libnbd) BlockStatus64(uint64, uint64, ExtentCallback64, *BlockStatus64Optargs) error {
	return ErrUnavailable
}
