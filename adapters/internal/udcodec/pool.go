// Package udcodec is the gRPC codec and buffer pool of the runner's own
// connections to Numaflow containers. It is given to those connections as
// dial and call options only (never registered globally), so other gRPC
// clients in the process (the OTLP exporter) keep grpc-go's defaults.
//
// Two costs of grpc-go's defaults dominate large payloads (hack/bench
// RESULTS.md): its buffer pool has tiers of 256 B, 4, 16, 32 KiB and 1 MiB
// and clears a whole tier buffer on every Get, so a 64 KiB message clears
// 1 MiB; and its proto codec copies a payload twice on each side (marshal
// into a pooled buffer, then into the frames; frames into a pooled buffer,
// then into the message). This package has a pool with power-of-two tiers
// that does not clear, and a codec that sends a large payload as it is and
// lets a received message's payload alias one buffer the message owns.
package udcodec

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Tiers of the pool: 2^minShift (256 B) to 2^maxShift (64 MiB, the
// largest message the SDK servers accept). Larger buffers are allocated.
const (
	minShift = 8
	maxShift = 26
)

// Pool is a mem.BufferPool with one sync.Pool per power of two from 256 B
// to 64 MiB. It does not clear buffers: grpc-go writes every byte of a
// buffer it gets before reading it (frames are read into them, messages
// are marshalled or copied into them), so clearing only burns CPU.
type Pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{} }

// tier is the index of the smallest tier holding n bytes, or -1 when n is
// larger than the largest tier.
func tier(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	shift := bits.Len(uint(n - 1)) // 2^shift >= n
	if shift > maxShift {
		return -1
	}
	return shift - minShift
}

// Get returns a buffer of length n. Its contents are whatever the last user
// left in it.
func (p *Pool) Get(n int) *[]byte {
	t := tier(n)
	if t < 0 {
		b := make([]byte, n)
		return &b
	}
	if v := p.tiers[t].Get(); v != nil {
		b := v.(*[]byte)
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+minShift))
	return &b
}

// Put gives a buffer back. Buffers whose capacity is not one of the tiers
// (not from Get, or larger than the largest tier) are left to the GC.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minShift || c&(c-1) != 0 {
		return
	}
	t := tier(c)
	if t < 0 {
		return
	}
	*b = (*b)[:0]
	p.tiers[t].Put(b)
}
