// Command spliceprobe measures what sending large payloads on a Unix
// socket without copying them would save: one writev(2) of HTTP/2-shaped
// frames (a 9-byte header, 16,384 bytes of payload: grpc-go's frame size),
// which the kernel copies into socket buffers, against vmsplice(2) of the
// same vectors into a pipe and splice(2) of the pipe into the socket,
// which Linux does by reference (MSG_SPLICE_PAGES since 6.5), so that the
// reader copies straight out of the sender's pages.
//
// The writer, this process, sends 1 MiB messages whose payloads cycle
// through a ring of buffers larger than the caches (as the runner's pooled
// payload buffers are) on a socket with a 1 MiB send buffer (the runner's
// udconn.SendBufferSize). A reader process reads it in 32 KiB reads
// (grpc-go's server reads through a 32 KiB buffer), checks every frame
// header and each message's stamp, and exits once it has read every byte.
// It prints the CPU time (user and system, getrusage) of each side per
// MiB, the rate, and the writer's context switches per MiB.
// Run it as: go run -C hack/bench ./cmd/spliceprobe.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/monovertex/monovertex/hack/bench/internal/sockprobe"
)

const (
	payloadLen = 16384
	headerLen  = 9
	frameLen   = headerLen + payloadLen
	msgFrames  = 64 // 1 MiB messages
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "read" {
		n, _ := strconv.Atoi(os.Args[2])
		if err := read(os.Args[3], n); err != nil {
			fmt.Fprintln(os.Stderr, "spliceprobe reader:", err)
			os.Exit(1)
		}
		return
	}
	modes := flag.String("modes", "writev,splice", "comma-separated send modes, each run in turn")
	mib := flag.Int("mib", 1024, "1 MiB messages each mode sends")
	ringMiB := flag.Int("ring", 48, "MiB of payload buffers the messages cycle through (larger than the caches)")
	rounds := flag.Int("rounds", 3, "times each mode is run, interleaved")
	rbuf := flag.Int("rbuf", 32<<10, "the reader's read size")
	flag.Parse()
	for r := 0; r < *rounds; r++ {
		for _, m := range strings.Split(*modes, ",") {
			w, rd, rate, sw, err := probe(m, *mib, *ringMiB, *rbuf)
			if err != nil {
				fmt.Fprintln(os.Stderr, "spliceprobe:", err)
				os.Exit(1)
			}
			fmt.Printf("round %d %-7s writer %6.1f µs/MiB  reader %6.1f µs/MiB  %6.0f MiB/s  %5.1f switches/MiB\n", r+1, m, w, rd, rate, sw)
		}
	}
}

// read reads frames from the socket at path, checking each, and returns
// once it has read them all.
func read(path string, frames int) error {
	c, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	f, err := c.(*net.UnixConn).File() // a blocking descriptor: plain read(2)s
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	rb, _ := strconv.Atoi(os.Getenv("RBUF"))
	buf := make([]byte, rb)
	frame := make([]byte, frameLen)
	var want uint64
	fill := 0
	for i := 0; i < frames; {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return fmt.Errorf("read: %v (%d)", err, n)
		}
		for b := buf[:n]; len(b) > 0; {
			k := copy(frame[fill:], b)
			fill += k
			b = b[k:]
			if fill == frameLen {
				fill = 0
				if frame[8] != 1 || int(frame[0])<<16|int(frame[1])<<8|int(frame[2]) != payloadLen {
					return fmt.Errorf("bad header at frame %d", i)
				}
				if i%msgFrames == 0 {
					if got := binary.LittleEndian.Uint64(frame[headerLen:]); got != want {
						return fmt.Errorf("message %d carries stamp %d", want, got)
					}
					want++
				}
				i++
			}
		}
	}
	return nil
}

// probe sends mib messages in mode and returns the writer's and the
// reader's CPU µs per MiB, the MiB/s, and the writer's switches per MiB.
func probe(mode string, mib, ringMiB, rbuf int) (w, rd, rate, sw float64, err error) {
	msgs := mib
	peer, err := sockprobe.StartPeer([]string{"RBUF=" + strconv.Itoa(rbuf)}, "read", strconv.Itoa(msgs*msgFrames))
	if err != nil {
		return
	}
	defer peer.Close()
	_ = peer.Conn().SetWriteBuffer(1 << 20) // the runner's udconn.SendBufferSize
	f := peer.File
	fd := int(f.Fd())
	ring := make([]byte, ringMiB<<20)
	for i := range ring {
		ring[i] = 1
	}
	hdrs := make([]byte, len(ring)/payloadLen*headerLen)
	for i := 0; i < len(hdrs); i += headerLen {
		h := hdrs[i:]
		h[0], h[1], h[2] = payloadLen>>16, payloadLen>>8&0xff, payloadLen&0xff
		h[8] = 1
	}
	var p [2]int
	if mode == "splice" {
		if err = syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
			return
		}
		defer syscall.Close(p[0])
		defer syscall.Close(p[1])
		if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(p[1]), 1031 /*F_SETPIPE_SZ*/, 1<<20); e != 0 {
			err = e
			return
		}
	}
	start, s0 := sockprobe.Usage()
	t0 := time.Now()
	off := 0
	iov := make([]syscall.Iovec, 0, 2*msgFrames)
	for m := 0; m < msgs; m++ {
		// A spliced message's pages are read by the reader after the
		// call returned: the ring is reused only after far more than the
		// socket and the pipe hold, and the reader checks each stamp.
		if off+msgFrames*payloadLen > len(ring) {
			off = 0
		}
		binary.LittleEndian.PutUint64(ring[off:], uint64(m))
		iov = iov[:0]
		for j := 0; j < msgFrames; j++ {
			h := syscall.Iovec{Base: &hdrs[(off/payloadLen+j)*headerLen]}
			h.SetLen(headerLen)
			b := syscall.Iovec{Base: &ring[off+j*payloadLen]}
			b.SetLen(payloadLen)
			iov = append(iov, h, b)
		}
		off += msgFrames * payloadLen
		switch mode {
		case "writev":
			err = writevAll(fd, iov)
		case "splice":
			err = spliceAll(fd, p, iov)
		}
		if err != nil {
			return
		}
	}
	end, s1 := sockprobe.Usage()
	cmd := peer.Cmd
	if err = peer.Wait(); err != nil {
		return
	}
	wall := time.Since(t0)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	rcpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	m := float64(mib)
	return float64((end - start).Microseconds()) / m, float64(rcpu.Microseconds()) / m, m / wall.Seconds(), float64(s1-s0) / m, nil
}

// writevAll writes every byte iov points to.
func writevAll(fd int, iov []syscall.Iovec) error {
	for len(iov) > 0 {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return fmt.Errorf("writev: %w", e)
		}
		iov = sockprobe.Advance(iov, int(n))
	}
	return nil
}

// spliceAll vmsplices iov into the pipe and splices the pipe into the socket.
func spliceAll(fd int, p [2]int, iov []syscall.Iovec) error {
	inPipe := 0
	for len(iov) > 0 || inPipe > 0 {
		if len(iov) > 0 {
			n, _, e := syscall.Syscall6(syscall.SYS_VMSPLICE, uintptr(p[1]), uintptr(unsafe.Pointer(&iov[0])), uintptr(min(len(iov), 1024)), 2 /*SPLICE_F_NONBLOCK*/, 0, 0)
			if e != 0 && e != syscall.EAGAIN && e != syscall.EINTR {
				return fmt.Errorf("vmsplice: %w", e)
			}
			if e == 0 {
				inPipe += int(n)
				iov = sockprobe.Advance(iov, int(n))
			}
		}
		if inPipe > 0 {
			n, _, e := syscall.Syscall6(syscall.SYS_SPLICE, uintptr(p[0]), 0, uintptr(fd), 0, uintptr(inPipe), 1|4 /*MOVE|MORE*/)
			if e == syscall.EINTR {
				continue
			}
			if e != 0 {
				return fmt.Errorf("splice: %w", e)
			}
			inPipe -= int(n)
		}
	}
	return nil
}
