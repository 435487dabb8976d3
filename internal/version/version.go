// Package version holds the build's version and commit, stamped by ko (see
// ko.yaml) or `go build -ldflags "-X ..."`.
package version

// Version is the release version, or "dev" for an unstamped build.
var Version = "dev"

// Commit is the git commit the binary was built from, or "unknown".
var Commit = "unknown"
