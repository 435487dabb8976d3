//go:build !unix

package cewire

import "net"

// peekIdle cannot look at a socket here; alive falls back to a short read.
func peekIdle(net.Conn) (usable, ok bool) { return false, false }
