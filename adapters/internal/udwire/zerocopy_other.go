//go:build !linux

package udwire

import (
	"sync/atomic"
	"syscall"

	"github.com/monovertex/monovertex/internal/payloadpool"
)

// zcMinPart is as on Linux; elsewhere nothing is spliced.
const zcMinPart = 16 << 10

// zeroCopy is never made outside Linux: every write copies.
type zeroCopy struct{ waiting atomic.Int32 }

type holding struct {
	pins  []*payloadpool.Pin
	sides [][]byte
}

func newZeroCopy(*rawSock) *zeroCopy                      { return nil }
func (z *zeroCopy) usable() bool                          { return false }
func (z *zeroCopy) begin()                                {}
func (z *zeroCopy) finish(*holding)                       {}
func (z *zeroCopy) check()                                {}
func (z *zeroCopy) close()                                {}
func (z *zeroCopy) write(*rawSock, []syscall.Iovec) error { return nil }
