// Package payloadpool keeps the buffers that large payloads are received
// into, so that a buffer goes back to work once the engine is done with
// the message instead of being left to the garbage collector.
//
// At 1 MiB payloads a fresh buffer per message costs more than the copy
// into it: the heap grows, the collector runs twice as often, and each new
// span's pages fault in cold (hack/bench RESULTS.md, udcodec.owned and the
// HTTP source's memclr). The engine calls Message.Release when no stage or
// sink will read a payload again, and the adapter that received it puts
// its Buffer back here.
//
// Sizes are classes of one eighth of a power of two (a 1 MiB payload with
// its envelope takes a 1.125 MiB buffer, not a 2 MiB one), from MinSize up
// to 64 MiB. Below MinSize the classes are powers of two, pooled without
// the bookkeeping of the large ones: a container's small messages pass
// through such a buffer on their way to the decoder, one per message.
// Larger sizes are allocated and left to the collector.
package payloadpool

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Size classes: steps per power of two, and the powers covered.
const (
	stepShift = 3 // 8 classes between two powers of two
	minShift  = 14
	maxShift  = 26

	// MinSize is the smallest payload whose buffer Held counts and the
	// collector's pacing leaves out of the heap's headroom: below it
	// buffers are small next to the rest of the heap.
	MinSize = 1 << minShift

	// smallMinShift is the smallest small class, 64 bytes.
	smallMinShift = 6
)

// Buffer is a pooled buffer. B holds the bytes asked for; what they are
// until written is whatever the buffer's last user left there.
type Buffer struct {
	B     []byte
	class int // index of the size class; -1 when not pooled
	small bool
	out   bool
}

// Release gives the buffer back. Nothing may read or write B afterwards.
// A nil Buffer, or a second Release before Get hands the buffer out
// again, does nothing; after that it would give back the next user's
// buffer, so each owner releases once (the engine clears Message.Release
// when it calls it).
func (b *Buffer) Release() {
	if b == nil || !b.out {
		return
	}
	b.out = false
	if b.class < 0 {
		b.B = nil
		return
	}
	b.B = b.B[:0]
	if b.small {
		smallClasses[b.class].Put(b)
		return
	}
	classes[b.class].Put(b)
}

// smallClasses has one pool per power of two from 1<<smallMinShift to
// MinSize.
var smallClasses [minShift - smallMinShift + 1]sync.Pool

// getSmall returns a pooled buffer of n bytes, 0 < n <= MinSize. Unlike
// a large one it is not counted in Held and has no cleanup: the pacer's
// headroom is about megabyte payloads, and a cleanup per buffer would be
// bookkeeping on every small message.
func getSmall(n int) *Buffer {
	k := max(bits.Len(uint(n-1)), smallMinShift) // 2^(k-1) < n <= 2^k
	c := k - smallMinShift
	if v := smallClasses[c].Get(); v != nil {
		b := v.(*Buffer)
		b.B = b.B[:n]
		b.out = true
		return b
	}
	return &Buffer{B: make([]byte, n, 1<<k), class: c, small: true, out: true}
}

// classes has one pool per size class.
var classes [(maxShift - minShift) << stepShift]sync.Pool

// class returns the index of the smallest class holding n bytes and that
// class's size, or -1 when n is outside the pooled range.
func class(n int) (int, int) {
	if n <= MinSize || n > 1<<maxShift {
		return -1, 0
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := 1 << (k - stepShift)
	sub := (n - 1<<k + step - 1) / step // 1..8
	return (k-minShift)<<stepShift + sub - 1, 1<<k + sub*step
}

// Get returns a buffer of n bytes whose contents are undefined.
func Get(n int) *Buffer {
	if n > 0 && n <= MinSize {
		return getSmall(n)
	}
	c, size := class(n)
	if c < 0 {
		return &Buffer{B: make([]byte, n), class: -1, out: true}
	}
	if v := classes[c].Get(); v != nil {
		b := v.(*Buffer)
		b.B = b.B[:n]
		b.out = true
		return b
	}
	b := &Buffer{B: make([]byte, n, size), class: c, out: true}
	held.Add(int64(size))
	// A pooled buffer lives until sync.Pool drops it at a collection (or
	// its owner loses it without a Release); either way the collector
	// frees it, and only then does it stop counting.
	runtime.AddCleanup(b, func(n int64) { held.Add(-n) }, int64(size))
	return b
}

// held is the bytes of pooled buffers the collector has not freed.
var held atomic.Int64

// Held returns the bytes of pooled buffers the collector has not freed:
// those handed out and those waiting in the pool. They are live heap that
// is reused rather than garbage, which the runner's collector pacing
// leaves out of the headroom it gives the heap to grow.
func Held() int64 { return held.Load() }

// Backs reports whether v lies in the buffer's memory, as a payload
// decoded from the buffer without a copy does.
func (b *Buffer) Backs(v []byte) bool {
	if b == nil || cap(b.B) == 0 || len(v) == 0 {
		return false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b.B)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	return p >= base && p < base+uintptr(cap(b.B))
}
