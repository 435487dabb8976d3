// Command pause is the pod sandbox process: it holds the pod's namespaces
// and does nothing else until it is told to stop. The cluster builds its own
// because nothing may be pulled from outside the machine.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
