package udwire

// ScatterCounts returns how many scattered reads there were, and how many
// put back what they read past a wrong guess.
func ScatterCounts() (reads, putBack int64) { return scatters.Load(), putBacks.Load() }

// SocketPair is a connected pair of Unix stream sockets (socketPair).
var SocketPair = socketPair
