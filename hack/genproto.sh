#!/usr/bin/env bash
# Regenerates the Go code of the protos the project restates
# (internal/numaflowapi/mvtxdaemon). Needs protoc (Debian: protobuf-compiler,
# which also brings the google/protobuf/*.proto includes); the two plugins
# are built at pinned versions: protoc-gen-go at the google.golang.org/protobuf
# version of go.mod, protoc-gen-go-grpc at the version below.
set -euo pipefail
cd "$(dirname "$0")/.."
grpc_plugin_version=v1.6.2
command -v protoc >/dev/null || { echo "genproto: protoc not found; apt-get install protobuf-compiler" >&2; exit 1; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install "google.golang.org/protobuf/cmd/protoc-gen-go@$(go list -m -f '{{.Version}}' google.golang.org/protobuf)"
GOBIN=$bin go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$grpc_plugin_version"
PATH=$bin:$PATH protoc -I internal/numaflowapi/mvtxdaemon \
	--go_out=internal/numaflowapi/mvtxdaemon --go_opt=paths=source_relative \
	--go-grpc_out=internal/numaflowapi/mvtxdaemon --go-grpc_opt=paths=source_relative \
	mvtxdaemon.proto
