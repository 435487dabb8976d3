package main

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// dirtyPool is a gRPC buffer pool that hands out reused buffers without
// clearing them first. grpc-go's default pool clears every reused buffer,
// which shows up as runtime.memclrNoHeapPointers in the profiles of large
// messages; grpc-go keeps a non-clearing pool of its own for buffers it
// overwrites anyway. The -dirty-pool flag of grpc-baseline measures what
// skipping the clear is worth.
type dirtyPool struct {
	tiers []int // buffer capacities, ascending
	pools []sync.Pool
}

var _ mem.BufferPool = (*dirtyPool)(nil)

// newDirtyPool has a tier for every power of two from 256 B to 64 MiB:
// grpc-go's default tiers jump from 32 KiB to 1 MiB, so every message
// between them takes (and clears) a whole 1 MiB buffer.
func newDirtyPool() *dirtyPool {
	var tiers []int
	for t := 256; t <= 64<<20; t *= 2 {
		tiers = append(tiers, t)
	}
	return &dirtyPool{tiers: tiers, pools: make([]sync.Pool, len(tiers))}
}

func (p *dirtyPool) tier(size int) int {
	for i, t := range p.tiers {
		if size <= t {
			return i
		}
	}
	return -1
}

// Get returns a buffer of length size, with stale contents.
func (p *dirtyPool) Get(size int) *[]byte {
	i := p.tier(size)
	if i < 0 {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.pools[i].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, p.tiers[i])
	return &b
}

// Put keeps a buffer whose capacity is exactly one of the tiers.
func (p *dirtyPool) Put(b *[]byte) {
	if i := p.tier(cap(*b)); i >= 0 && p.tiers[i] == cap(*b) {
		p.pools[i].Put(b)
	}
}

// dirtyCodec is grpc-go's proto codec with its buffers from a dirtyPool
// instead of mem.DefaultBufferPool(), which the stock codec always uses
// whatever pool the connection was given.
type dirtyCodec struct{ pool *dirtyPool }

var _ encoding.CodecV2 = dirtyCodec{}

// Marshal encodes v into a pooled buffer (small messages into a plain slice).
func (c dirtyCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("dirtyCodec: %T is not a proto.Message", v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	if _, err := (proto.MarshalOptions{}).MarshalAppend((*buf)[:0], m); err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// Unmarshal decodes data into v.
func (c dirtyCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("dirtyCodec: %T is not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// Name replaces the stock codec: gRPC picks codecs by this name.
func (dirtyCodec) Name() string { return "proto" }

// useDirtyPool makes every gRPC call of this process use a dirtyPool.
func useDirtyPool() grpc.DialOption {
	p := newDirtyPool()
	encoding.RegisterCodecV2(dirtyCodec{pool: p})
	return experimental.WithBufferPool(p)
}
