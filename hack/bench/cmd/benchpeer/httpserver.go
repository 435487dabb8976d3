package main

import (
	"context"
	"io"
	"net/http"
	"time"
)

// runHTTPServer is the HTTP source scenario's baseline: a bare net/http
// server that reads each body into memory and answers 200 with no work in
// between.
func runHTTPServer(ctx context.Context, args []string) error {
	ln, err := listenFlag("http-server", "127.0.0.1:8080", args)
	if err != nil {
		return err
	}
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Hold the whole body in memory, as any server that passes the
			// message on must: one buffer of the announced size, one copy.
			if r.ContentLength >= 0 {
				buf := make([]byte, r.ContentLength)
				if _, err := io.ReadFull(r.Body, buf); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
			} else if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
		}),
	}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
