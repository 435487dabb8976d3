// Command runner is the monovertex runner: it reads from a source, passes
// messages through an optional transformer, writes them to a sink, and acks
// the source only after each message reached a final state. Settings come
// from the environment; run it with --help to list them. A runner with
// adapters of one's own is this file with one more import
// (docs/writing-an-adapter.md).
package main

import "github.com/monovertex/monovertex/runner/runnercmd"

func main() { runnercmd.Main() }
