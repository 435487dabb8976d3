//go:build tools

// Package codegen pins the code generators hack/codegen.sh builds: a module
// of its own, so the generators' dependencies stay out of the main module.
package codegen

import (
	_ "k8s.io/code-generator/cmd/client-gen"
	_ "k8s.io/code-generator/cmd/deepcopy-gen"
	_ "k8s.io/code-generator/cmd/informer-gen"
	_ "k8s.io/code-generator/cmd/lister-gen"
	_ "knative.dev/pkg/codegen/cmd/injection-gen"
)
