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

echo "== go test -race"
go test -race -timeout 50m ./...

echo "== nested modules: hack/bench (its tests check the benchmark clients' counting)"
(cd hack/bench && go vet ./... && go test ./...)

echo "== offline deploy proof (ko resolve against a local registry, Knative validation)"
(cd hack/tools && go vet ./...)
bash hack/ko-proof.sh

echo "== fuzz (${FUZZTIME:=10s} each)"
# package:target pairs; each runs its seed corpus in the suite above too.
fuzz_targets=(
  ./adapters/internal/cemap:FuzzRoundTrip
  ./adapters/internal/cemap:FuzzReadEvents
  ./adapters/internal/serverinfo:FuzzServerInfo
  ./adapters/source/http:FuzzRequest
)
for ft in "${fuzz_targets[@]}"; do
  pkg=${ft%%:*}; target=${ft##*:}
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"
done
echo "== all tests passed"
