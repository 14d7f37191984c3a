package daemon

import (
	"os"
	"runtime/debug"
)

// Memory: the daemon's heap holds the transfer file's tree (about twice
// the file's size), its image, and the view of its entries, and Go's
// collector lets the heap grow to twice what is live before it runs. For
// a transfer file of tens of megabytes (100,000 entries) that doubling is
// most of the resident size. So the daemon sets a soft memory limit
// (runtime/debug.SetMemoryLimit) from the file's size: the collector then
// runs sooner as the heap nears it, and memory stays bounded by a small
// multiple of the file. At 100,000 entries (a 21 MB file) about 90 MB are
// live (the tree about 45, the image and the buffer it is rewritten from
// about 25, the view 11); five times the file left the collector about
// 55 MB and it ran nearly without pause, six leaves it about 75 MB and
// the daemon's resident size under 200 MB. An administrator's GOMEMLIMIT
// is left as it is.
const (
	memoryBase    = 48 << 20 // the daemon without its transfer file
	memoryPerByte = 6        // heap per byte of the transfer file
)

// memoryLimit is the soft limit for a transfer file of size bytes.
func memoryLimit(size int) int64 {
	return memoryBase + memoryPerByte*int64(size)
}

// boundMemory sets the soft memory limit for the transfer file's size,
// unless GOMEMLIMIT is set; it changes it only when the file's size moved
// by more than an eighth, so that a flush of a steady file sets it once.
func (d *daemon) boundMemory() {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return
	}
	fi, err := os.Stat(d.cfg.TransferFile)
	if err != nil {
		return
	}
	size := int(fi.Size())
	if d.memSize > 0 && size < d.memSize+d.memSize/8 && size > d.memSize-d.memSize/8 {
		return
	}
	d.memSize = size
	debug.SetMemoryLimit(memoryLimit(size))
}
