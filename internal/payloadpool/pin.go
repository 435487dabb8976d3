package payloadpool

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// A Pin marks bytes that the kernel may still read after the system call
// that sent them returned: pages spliced into a socket (udwire's zero-copy
// writes) stay the kernel's to read until the peer has consumed them. A
// buffer overlapping a Pin is not handed out again, even once released,
// until every such Pin is gone: otherwise the next message received into
// it would change what the peer reads. The Pin also keeps the bytes
// themselves from the collector, for memory not from this pool.
type Pin struct {
	lo, hi uintptr
	b      []byte
}

// pins are the live Pins, and the released buffers waiting for them.
var pins struct {
	mu      sync.Mutex
	live    map[*Pin]struct{}
	waiting []*Buffer
}

// pinned counts the live Pins: Release looks no further while it is 0,
// which it is on every path that sends nothing by splicing.
var pinned atomic.Int64

// PinBytes pins b until Unpin. The caller pins before it hands the pages
// to the kernel and unpins once the kernel holds none of them.
func PinBytes(b []byte) *Pin {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p := &Pin{lo: lo, hi: lo + uintptr(len(b)), b: b}
	pins.mu.Lock()
	if pins.live == nil {
		pins.live = map[*Pin]struct{}{}
	}
	pins.live[p] = struct{}{}
	pinned.Add(1)
	pins.mu.Unlock()
	return p
}

// Unpin ends p, and gives back the released buffers no Pin holds now.
// A second Unpin does nothing.
func (p *Pin) Unpin() {
	var free []*Buffer
	pins.mu.Lock()
	if _, ok := pins.live[p]; !ok {
		pins.mu.Unlock()
		return
	}
	delete(pins.live, p)
	pinned.Add(-1)
	p.b = nil
	keep := pins.waiting[:0]
	for _, b := range pins.waiting {
		if overlapsPin(b) {
			keep = append(keep, b)
		} else {
			free = append(free, b)
		}
	}
	clear(pins.waiting[len(keep):])
	pins.waiting = keep
	pins.mu.Unlock()
	for _, b := range free {
		b.recycle()
	}
}

// parkIfPinned keeps b out of the pool while a Pin overlaps it, and says
// whether it did.
func parkIfPinned(b *Buffer) bool {
	if pinned.Load() == 0 {
		return false
	}
	pins.mu.Lock()
	defer pins.mu.Unlock()
	if !overlapsPin(b) {
		return false
	}
	pins.waiting = append(pins.waiting, b)
	return true
}

// overlapsPin says whether a live Pin lies in b's memory; pins.mu is held.
func overlapsPin(b *Buffer) bool {
	if cap(b.B) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b.B)))
	hi := lo + uintptr(cap(b.B))
	for p := range pins.live {
		if p.lo < hi && lo < p.hi {
			return true
		}
	}
	return false
}

// Parked is how many released buffers wait for a Pin to end.
func Parked() int {
	pins.mu.Lock()
	defer pins.mu.Unlock()
	return len(pins.waiting)
}
