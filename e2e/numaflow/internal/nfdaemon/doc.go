// Package mvtxdaemon is Numaflow's own generated MonoVertex daemon client,
// copied byte for byte from numaproj/numaflow at 63ba4e8c8
// (pkg/apis/proto/mvtxdaemon/: the .proto and the protoc-gen-go v1.36.11 and
// protoc-gen-go-grpc v1.4.0 output; Apache License 2.0, headers kept).
// The e2e test reads a runner with it, so what Numaflow's UI server and CLI
// hold is what the test holds; the runner serves the contract restated in
// internal/numaflowapi/mvtxdaemon, and the two are never linked together
// (both register the same proto names).
package mvtxdaemon
