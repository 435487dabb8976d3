package runnercmd

import (
	"context"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// exitQuit is the status after SIGQUIT: 128 + the signal's number, as a
// shell reports a process killed by it, and distinct from the 2 of a
// settings error (Go's own SIGQUIT handler exits 2).
const exitQuit = 128 + int(syscall.SIGQUIT)

// signalContext is cancelled by the first SIGTERM, SIGINT or SIGHUP (a
// closed terminal or a supervisor's reload asks for the same clean stop as
// Kubernetes' SIGTERM); a second one exits 1 at once. SIGQUIT prints every
// goroutine's stack to stderr, as Go does, and exits with exitQuit.
func signalContext() context.Context {
	// A closed stdout or stderr pipe must fail writes with EPIPE, which the
	// sinks and the logger handle, instead of killing the runner mid-drain.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(context.Background())
	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	quit := make(chan os.Signal, 1)
	signal.Notify(quit, syscall.SIGQUIT)
	go func() {
		<-stop
		cancel()
		<-stop
		os.Exit(exitFailed)
	}()
	go func() {
		<-quit
		pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		os.Exit(exitQuit)
	}()
	return ctx
}
