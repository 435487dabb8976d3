#!/usr/bin/env bash
# codegen.sh generates the MonoVertex API's deepcopy functions, its
# clientset, listers and informers (k8s.io/code-generator) and the
# knative.dev/pkg injection code and reconciler (injection-gen), from the
# types in internal/apis/numaflow/v1alpha1. The generators are built from
# the versions pinned in hack/codegen/go.mod, a module of its own, so they
# stay out of the main module's graph. Generated files are committed; run
# this after changing the types, or with --verify to check that the
# committed files are current (exit 1 and a diff when they are not).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODULE=github.com/monovertex/monovertex
APIS=$MODULE/internal/apis/numaflow/v1alpha1
CLIENT=internal/client
HEADER=$ROOT/hack/codegen/boilerplate.go.txt
# No --plural-exceptions: injection-gen's informer generator ignores them
# and would call MonoVertexes() on informers generated as MonoVertices().
# The Go names stay MonoVertexes everywhere, and the type's
# +resourceName=monovertices tag gives client-gen the CRD's plural.

OUT=$ROOT
if [[ ${1:-} == --verify ]]; then
	# Generate into a copy of the tree and compare.
	OUT=$(mktemp -d)
	trap 'rm -rf "$OUT"' EXIT
	(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$OUT" 2>/dev/null || true)
fi

BIN=$(mktemp -d)
trap 'rm -rf "$BIN"; [[ $OUT != "$ROOT" ]] && rm -rf "$OUT"' EXIT
(cd "$ROOT/hack/codegen" && GOBIN=$BIN go install \
	k8s.io/code-generator/cmd/client-gen \
	k8s.io/code-generator/cmd/deepcopy-gen \
	k8s.io/code-generator/cmd/informer-gen \
	k8s.io/code-generator/cmd/lister-gen \
	knative.dev/pkg/codegen/cmd/injection-gen)

cd "$OUT"
rm -rf "$CLIENT" internal/apis/numaflow/v1alpha1/zz_generated.deepcopy.go

"$BIN/deepcopy-gen" --go-header-file "$HEADER" \
	--output-file zz_generated.deepcopy.go "$APIS"

"$BIN/client-gen" --go-header-file "$HEADER" \
	--clientset-name versioned \
	--input-base "" --input "$APIS" \
	--output-dir "$CLIENT/clientset" --output-pkg "$MODULE/$CLIENT/clientset"

"$BIN/lister-gen" --go-header-file "$HEADER" \
	--output-dir "$CLIENT/listers" --output-pkg "$MODULE/$CLIENT/listers" "$APIS"

"$BIN/informer-gen" --go-header-file "$HEADER" \
	--output-dir "$CLIENT/informers" --output-pkg "$MODULE/$CLIENT/informers" \
	--versioned-clientset-package "$MODULE/$CLIENT/clientset/versioned" \
	--listers-package "$MODULE/$CLIENT/listers" "$APIS"

"$BIN/injection-gen" --go-header-file "$HEADER" \
	--input-dirs "$APIS" \
	--versioned-clientset-package "$MODULE/$CLIENT/clientset/versioned" \
	--external-versions-informers-package "$MODULE/$CLIENT/informers/externalversions" \
	--listers-package "$MODULE/$CLIENT/listers" \
	--output-package "$MODULE/$CLIENT/injection" \
	--output-dir "$CLIENT/injection"

gofmt -s -w "$CLIENT" internal/apis/numaflow/v1alpha1

if [[ $OUT != "$ROOT" ]]; then
	diff -ru "$ROOT/$CLIENT" "$OUT/$CLIENT" &&
		diff -u "$ROOT/internal/apis/numaflow/v1alpha1/zz_generated.deepcopy.go" \
			"$OUT/internal/apis/numaflow/v1alpha1/zz_generated.deepcopy.go" ||
		{ echo "codegen.sh: generated code is out of date: run bash hack/codegen.sh" >&2; exit 1; }
	echo "codegen.sh: generated code is current"
fi
