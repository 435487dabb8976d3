// Command custom-runner is the monovertex runner with one adapter kind of
// its own, the sequence source, beside every built-in one: the whole of a
// runner built outside the monovertex module (docs/writing-an-adapter.md).
package main

import (
	_ "github.com/monovertex/monovertex/adapters/all"
	"github.com/monovertex/monovertex/runner/runnercmd"

	_ "example.com/custom-runner/sequence"
)

func main() { runnercmd.Main() }
