package main

// Every adapter kind registers itself in its package's init; the one list
// of them is adapters/all, which mvctl imports too.
import _ "github.com/monovertex/monovertex/adapters/all"
