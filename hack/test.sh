#!/usr/bin/env bash
# The project's test command (README "Two commands"; .ci/run calls it):
# formatting, vet, the whole test suite with -race (engine, adapters with
# their conformance suites, end-to-end tests with real processes), the
# offline Knative deploy-path proof, short fuzz runs, and the deploy/
# examples on a real Kubernetes with Knative that hack/cluster starts.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race, with coverage of the unit tests and of the processes the end-to-end tests start"
# One run collects both: -coverprofile gets the test binaries' counters,
# and the runner and example programs the e2e tests build (internal/testutil)
# are built with -cover and write theirs to GOCOVERDIR=$MONOVERTEX_COVERDIR.
# atomic is the only mode -race allows. COVERAGE_FLOOR is 2 points under
# the total measured when it was set (docs/reliability.md, "Coverage").
: "${COVERAGE_FLOOR:=87.7}"
covdir=$(mktemp -d)
trap 'rm -rf "$covdir"' EXIT
mkdir "$covdir/e2e"
MONOVERTEX_COVERDIR="$covdir/e2e" go test -race -cover -covermode=atomic -coverpkg=./... \
  -coverprofile="$covdir/unit.out" -timeout 50m ./...

echo "== coverage (unit tests + end-to-end runs of the built binaries)"
go tool covdata textfmt -i="$covdir/e2e" -o "$covdir/e2e.out"
bash hack/coverage.sh "$COVERAGE_FLOOR" "$covdir/unit.out" "$covdir/e2e.out"

echo "== nested modules: hack/bench (its tests check the benchmark clients' counting)"
(cd hack/bench && go vet ./... && go test ./...)

echo "== nested modules: hack/goaws (the SQS server the SQS tests build and start)"
(cd hack/goaws && go vet ./...)

echo "== the MonoVertex API's generated clients are current (hack/codegen.sh)"
bash hack/codegen.sh --verify

echo "== offline deploy proof (ko resolve against a local registry, Knative validation)"
(cd hack/tools && go vet ./...)
bash hack/ko-proof.sh

# Execution counts, not durations: with a duration, Go 1.26's fuzz
# coordinator can report "context deadline exceeded" as a failure when the
# deadline falls while a worker is mid-input (golang/go#75804, fixed in Go
# 1.27; it failed FuzzServerInfo in CI with no failing input). Each count
# is about 10 s of fuzzing on a 2-core machine. FUZZTIME overrides them all
# (a count such as 5000x, or a duration).
echo "== fuzz (${FUZZTIME:-about 10s} each)"
# package:target:count triples; each runs its seed corpus in the suite above too.
fuzz_targets=(
  ./adapters/internal/cewire:FuzzRoundTrip:65000x
  ./adapters/internal/cewire:FuzzReadEvents:160000x
  ./adapters/internal/cewire:FuzzBinaryRequestMatchesTheSDK:80000x
  ./adapters/internal/cewire:FuzzAnswerMatchesNetHTTP:100000x
  ./adapters/internal/cewire:FuzzBinaryEventMatchesTheSDK:130000x
  ./adapters/internal/udconn:FuzzServerInfo:35000x
  ./adapters/internal/udwire:FuzzServerFrames:10000x
  ./adapters/source/http:FuzzRequest:100000x
  ./adapters/source/http:FuzzGuardFraming:40000x
  ./adapters/filter:FuzzSettings:50000x
  ./adapters/sink/jetstream:FuzzPlainPubAck:90000x
  ./adapters/sink/jetstream:FuzzOnAck:60000x
)
for ft in "${fuzz_targets[@]}"; do
  IFS=: read -r pkg target count <<<"$ft"
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "${FUZZTIME:-$count}" "$pkg"
done
# The deploy/ examples on a real single-node Kubernetes with Knative Serving
# and Eventing (hack/cluster): built once from the Go module proxy and Debian
# packages (cached outside the work tree), started, used as a user would
# (ko apply, kn service create, kubectl), counted, and stopped again.
# MONOVERTEX_CLUSTER=0 skips it (it needs root and, cold, a long build).
if [ "${MONOVERTEX_CLUSTER:-1}" != 0 ]; then
  echo "== a real cluster: hack/cluster/up.sh, e2e/cluster, hack/cluster/down.sh"
  bash hack/cluster/down.sh >/dev/null 2>&1 || true # what an earlier run left
  trap 'bash hack/cluster/down.sh >/dev/null 2>&1; rm -rf "$covdir"' EXIT
  # up.sh's last line is the env file; tee to a file of our own (tee to
  # /dev/stderr would reopen, and truncate, a log file stderr points to).
  bash hack/cluster/up.sh | tee "$covdir/cluster-up.log"
  envfile=$(tail -1 "$covdir/cluster-up.log")
  MONOVERTEX_CLUSTER_ENV="$envfile" go test -count=1 -v -timeout 45m ./e2e/cluster/
  bash hack/cluster/down.sh
else
  echo "== a real cluster: skipped (MONOVERTEX_CLUSTER=0)"
fi
echo "== all tests passed"
