// Command readvprobe measures whether reading gRPC DATA frames straight into
// a message's buffer would save CPU over reading them into a socket buffer
// and copying each frame's payload out, the one user copy the runner makes
// per received payload.
//
// A writer process sends HTTP/2-shaped frames (a 9-byte header, then 16,384
// bytes of payload: grpc-go's frame size, whatever the peer allows) on a
// Unix socket as fast as it can. The reader, this process, takes every
// frame's payload into a ring of message buffers larger than the caches (as
// the runner's pooled payload buffers are), in one of three ways:
//
//	copy      read(2) up to 256 KiB into a buffer, copy each payload out
//	          (what udwire does);
//	scatter   one readv(2) of 16 frames with each payload's vector in the
//	          message and each header's in a small array: the best case of a
//	          reader that guesses where the headers fall, every guess right;
//	perframe  one readv(2) per frame: its payload and the next header.
//
// It prints the reader's CPU time (user and system, getrusage) per MiB of
// payload, its rate, and its context switches per MiB. Run it as: go run -C hack/bench ./cmd/readvprobe.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/monovertex/monovertex/hack/bench/internal/sockprobe"
)

const (
	payloadLen = 16384 // grpc-go's http2MaxFrameLen
	headerLen  = 9
	frameLen   = headerLen + payloadLen
	perWrite   = 64 // frames per write(2) of the writer
	scattered  = 16 // frames per readv(2) in scatter mode
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "write" {
		if err := write(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "readvprobe writer:", err)
			os.Exit(1)
		}
		return
	}
	modes := flag.String("modes", "copy,scatter,perframe", "comma-separated read modes, each run in turn")
	mib := flag.Int("mib", 2048, "MiB of payload each mode reads")
	ringMiB := flag.Int("ring", 48, "MiB of message buffers the payloads cycle through (larger than the caches)")
	rounds := flag.Int("rounds", 3, "times each mode is run, interleaved")
	flag.Parse()
	for r := 0; r < *rounds; r++ {
		for _, m := range strings.FieldsFunc(*modes, func(r rune) bool { return r == ',' }) {
			res, err := probe(m, *mib, *ringMiB)
			if err != nil {
				fmt.Fprintln(os.Stderr, "readvprobe:", err)
				os.Exit(1)
			}
			fmt.Printf("round %d  %-9s %7.1f µs CPU per MiB  %6.0f MiB/s  %5.1f context switches per MiB\n", r+1, m, res.cpuPerMiB, res.mibPerSec, res.switchesPerMiB)
		}
	}
}

// write sends frames on the socket at path until the reader hangs up.
func write(path string) error {
	c, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	chunk := make([]byte, perWrite*frameLen)
	for i := 0; i < perWrite; i++ {
		h := chunk[i*frameLen:]
		h[0], h[1], h[2] = payloadLen>>16, payloadLen>>8&0xff, payloadLen&0xff
		h[8] = 1 // stream 1, type DATA, no flags
	}
	for {
		if _, err := c.Write(chunk); err != nil {
			return nil // the reader is done
		}
	}
}

type result struct{ cpuPerMiB, mibPerSec, switchesPerMiB float64 }

func probe(mode string, mib, ringMiB int) (result, error) {
	peer, err := sockprobe.StartPeer(nil, "write")
	if err != nil {
		return result{}, err
	}
	defer peer.Close()
	f := peer.File
	fd := int(f.Fd())
	ring := make([]byte, ringMiB<<20)
	for i := range ring {
		ring[i] = 1 // fault the ring in before measuring
	}
	frames := mib << 20 / payloadLen
	start, switches := sockprobe.Usage()
	t0 := time.Now()
	switch mode {
	case "copy":
		err = readCopy(fd, ring, frames)
	case "scatter":
		err = readScatter(fd, ring, frames, scattered)
	case "perframe":
		err = readScatter(fd, ring, frames, 1)
	default:
		err = fmt.Errorf("unknown mode %q (copy, scatter, perframe)", mode)
	}
	if err != nil {
		return result{}, err
	}
	end, switchesEnd := sockprobe.Usage()
	cpu, wall := end-start, time.Since(t0)
	runtime.KeepAlive(f)
	got := float64(frames*payloadLen) / (1 << 20)
	return result{cpuPerMiB: float64(cpu.Microseconds()) / got, mibPerSec: got / wall.Seconds(), switchesPerMiB: float64(switchesEnd-switches) / got}, nil
}

// readCopy reads up to 256 KiB at a time and copies each frame's payload
// into the ring.
func readCopy(fd int, ring []byte, frames int) error {
	buf := make([]byte, 256<<10)
	r, w := 0, 0
	fill := func(k int) error { // at least k bytes buffered
		if w-r >= k {
			return nil
		}
		copy(buf, buf[r:w])
		w -= r
		r = 0
		for w-r < k {
			n, err := syscall.Read(fd, buf[w:])
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			if n == 0 {
				return fmt.Errorf("the writer hung up")
			}
			w += n
		}
		return nil
	}
	off := 0
	for i := 0; i < frames; i++ {
		if err := fill(headerLen); err != nil {
			return err
		}
		if err := checkHeader(buf[r : r+headerLen]); err != nil {
			return err
		}
		r += headerLen
		for left := payloadLen; left > 0; {
			if err := fill(1); err != nil {
				return err
			}
			k := min(left, w-r)
			copy(ring[off:], buf[r:r+k])
			r, off, left = r+k, off+k, left-k
		}
		if off+payloadLen > len(ring) {
			off = 0
		}
	}
	return nil
}

// readScatter reads k frames per readv(2): each payload straight into the
// ring, each following header into hdrs.
func readScatter(fd int, ring []byte, frames, k int) error {
	hdrs := make([][headerLen]byte, k)
	if _, err := syscall.Read(fd, hdrs[k-1][:]); err != nil { // the first header
		return err
	}
	iov := make([]syscall.Iovec, 0, 2*k)
	off := 0
	for i := 0; i < frames; i += k {
		if err := checkHeader(hdrs[k-1][:]); err != nil {
			return err
		}
		iov = iov[:0]
		want := 0
		for j := 0; j < k; j++ {
			if off+payloadLen > len(ring) {
				off = 0
			}
			p := syscall.Iovec{Base: &ring[off]}
			p.SetLen(payloadLen)
			h := syscall.Iovec{Base: &hdrs[j][0]}
			h.SetLen(headerLen)
			iov = append(iov, p, h)
			off += payloadLen
			want += frameLen
		}
		for v := iov; want > 0; {
			n, _, e := syscall.Syscall(syscall.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)))
			if e == syscall.EINTR {
				continue
			}
			if e != 0 {
				return fmt.Errorf("readv: %w", e)
			}
			if n == 0 {
				return fmt.Errorf("the writer hung up")
			}
			want -= int(n)
			v = sockprobe.Advance(v, int(n))
		}
		for j := 0; j < k-1; j++ {
			if err := checkHeader(hdrs[j][:]); err != nil {
				return err
			}
		}
	}
	runtime.KeepAlive(ring)
	return nil
}

// checkHeader confirms the reader is in step with the writer's frames.
func checkHeader(h []byte) error {
	if n := int(h[0])<<16 | int(h[1])<<8 | int(h[2]); n != payloadLen || h[8] != 1 {
		return fmt.Errorf("out of step: a header says %d bytes on stream %d", n, h[8])
	}
	return nil
}
