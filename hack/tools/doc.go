// Package tools is a separate Go module that pins the build tools (ko) and
// the libraries of the offline deploy-path test, so that neither ko,
// go-containerregistry nor knative.dev/serving enters the runner's module.
//
// Run the test from this directory:
//
//	go test ./...
//
// It starts an OCI registry on 127.0.0.1, pushes a minimal non-root base
// image, runs `ko resolve` on every example under deploy/ exactly as
// `ko apply -f deploy/<example>/` would, pulls the runner image back and runs
// its binary with --version, and validates every Knative Service with
// knative.dev/serving's own defaulting and validation (the admission
// webhook's code). Use `go tool ko` from here to run the pinned ko.
package tools
