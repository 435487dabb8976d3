// Command runner is the monovertex runner: it reads from a source, passes
// messages through an optional transformer, writes them to a sink, and acks
// the source only after each message reached a final state. Settings come
// from the environment; run it with --help to list them. A runner with
// adapters of one's own is this file with one import more
// (docs/writing-an-adapter.md).
package main

import (
	// Every adapter kind registers itself in its package's init; the one
	// list of them is adapters/all, which mvctl imports too.
	_ "github.com/monovertex/monovertex/adapters/all"
	"github.com/monovertex/monovertex/runner/runnercmd"
)

func main() { runnercmd.Main() }
