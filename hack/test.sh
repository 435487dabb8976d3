#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run calls it):
# formatting, vet, the whole test suite with -race (engine, adapters with
# their conformance suites, end-to-end tests with real processes), the
# offline Knative deploy-path proof, and short fuzz runs.
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
# the total measured when it was set (README "Coverage").
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

echo "== offline deploy proof (ko resolve against a local registry, Knative validation)"
(cd hack/tools && go vet ./...)
bash hack/ko-proof.sh

echo "== fuzz (${FUZZTIME:=10s} each)"
# package:target pairs; each runs its seed corpus in the suite above too.
fuzz_targets=(
  ./adapters/internal/cewire:FuzzRoundTrip
  ./adapters/internal/cewire:FuzzReadEvents
  ./adapters/internal/udconn:FuzzServerInfo
  ./adapters/source/http:FuzzRequest
)
for ft in "${fuzz_targets[@]}"; do
  pkg=${ft%%:*}; target=${ft##*:}
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"
done
echo "== all tests passed"
