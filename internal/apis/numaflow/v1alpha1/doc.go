// Package v1alpha1 holds the Numaflow MonoVertex API types
// (numaflow.numaproj.io/v1alpha1) that mvctl reads and cmd/controller
// reconciles. The module github.com/numaproj/numaflow is not served by the
// Go module proxy, so the types are mirrored here with Numaflow's JSON names
// (zz_types.go); the Kubernetes types they embed come from k8s.io/api.
//
// The package sits at apis/<group>/<version> because client-gen and
// injection-gen take the version from the last path element; it is
// internal because the mirror follows Numaflow's types and promises no API
// of its own. hack/codegen.sh generates zz_generated.deepcopy.go here and
// the clients under internal/client.
//
// +k8s:deepcopy-gen=package
// +groupName=numaflow.numaproj.io
package v1alpha1
