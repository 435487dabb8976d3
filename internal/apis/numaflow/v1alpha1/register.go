package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is numaflow.numaproj.io/v1alpha1, the name the
// generated clients look for.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Resource qualifies a resource name with the group (the generated
// listers' NotFound errors use it).
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers the MonoVertex types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the MonoVertex types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &MonoVertex{}, &MonoVertexList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
