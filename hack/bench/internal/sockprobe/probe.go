// Package sockprobe holds what the socket probes (cmd/readvprobe,
// cmd/spliceprobe) share: the peer process on the other end of the
// socket, the process's CPU time, and vectors that a partial system call
// advanced.
package sockprobe

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// Usage is the process's CPU time (user and system) and context switches
// (voluntary and not) so far: how often a mode sleeps and wakes is part
// of its cost.
func Usage() (time.Duration, int64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}

// Advance drops n bytes from the front of v.
func Advance(v []syscall.Iovec, n int) []syscall.Iovec {
	for n > 0 && len(v) > 0 {
		if int(v[0].Len) <= n {
			n -= int(v[0].Len)
			v = v[1:]
			continue
		}
		v[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(v[0].Base), n))
		v[0].SetLen(int(v[0].Len) - n)
		n = 0
	}
	return v
}

// Peer is the other end of a probe: a process started from this binary
// with its own arguments, connected to this one on a Unix socket.
type Peer struct {
	Cmd  *exec.Cmd
	File *os.File // this side's end, a blocking descriptor: plain system calls
	dir  string
	l    net.Listener
	c    net.Conn
}

// StartPeer starts os.Args[0] with args and then the socket's path, with
// env added to its environment, and accepts its connection.
func StartPeer(env []string, args ...string) (*Peer, error) {
	dir, err := os.MkdirTemp("", "sockprobe")
	if err != nil {
		return nil, err
	}
	p := &Peer{dir: dir}
	path := filepath.Join(dir, "s")
	if p.l, err = net.Listen("unix", path); err != nil {
		p.Close()
		return nil, err
	}
	p.Cmd = exec.Command(os.Args[0], append(args, path)...)
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stderr = os.Stderr
	if err := p.Cmd.Start(); err != nil {
		p.Cmd = nil
		p.Close()
		return nil, err
	}
	// A peer that fails before it connects must not leave Accept waiting.
	_ = p.l.(*net.UnixListener).SetDeadline(time.Now().Add(30 * time.Second))
	if p.c, err = p.l.Accept(); err != nil {
		p.Close()
		return nil, err
	}
	if p.File, err = p.c.(*net.UnixConn).File(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Conn is this side's end as a Unix connection, for its options.
func (p *Peer) Conn() *net.UnixConn { return p.c.(*net.UnixConn) }

// Wait waits for the peer to exit on its own.
func (p *Peer) Wait() error {
	err := p.Cmd.Wait()
	p.Cmd = nil
	return err
}

// Close ends the connection, stops the peer if it still runs, and
// removes the socket.
func (p *Peer) Close() {
	if p.File != nil {
		p.File.Close()
	}
	if p.c != nil {
		p.c.Close()
	}
	if p.l != nil {
		p.l.Close()
	}
	if p.Cmd != nil {
		_ = p.Cmd.Process.Kill()
		_ = p.Cmd.Wait()
	}
	os.RemoveAll(p.dir)
}
