package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
)

// runPump writes fixed-size chunks through a Unix socket to a reader in the
// same process: two copies through the kernel and nothing else, the
// physical limit any protocol over a Unix socket works under.
func runPump(ctx context.Context, args []string) error {
	fs, win := measureFlags("pump")
	size := fs.Int("size", 1<<20, "bytes per chunk (the payload size)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *size <= 0 {
		return fmt.Errorf("-size must be positive")
	}
	dir, err := os.MkdirTemp("", "mvpump")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "pump.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	defer ln.Close()
	var chunks, total atomic.Int64
	readErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			readErr <- err
			return
		}
		defer c.Close()
		buf := make([]byte, *size)
		for {
			n, err := io.ReadFull(c, buf)
			total.Add(int64(n))
			if err != nil {
				readErr <- err
				return
			}
			chunks.Add(1)
		}
	}()
	w, err := net.Dial("unix", sock)
	if err != nil {
		return fmt.Errorf("dial %s: %w", sock, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		buf := make([]byte, *size)
		for ctx.Err() == nil {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}()
	r, err := win.measure(ctx, func() (int64, int64) { return chunks.Load(), total.Load() })
	cancel()
	w.Close()
	if err != nil {
		return err
	}
	select {
	case err := <-readErr:
		if err != io.EOF && err != io.ErrUnexpectedEOF {
			return fmt.Errorf("reader: %w", err)
		}
	default:
	}
	return printResult(r)
}
