package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection"
	"knative.dev/pkg/webhook"
	"knative.dev/pkg/webhook/resourcesemantics"
	"knative.dev/pkg/webhook/resourcesemantics/validation"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	"github.com/monovertex/monovertex/internal/mvconvert"
)

// validationWebhookName is the ValidatingWebhookConfiguration the webhook
// fills in (rules and CA bundle); deploy/controller creates it empty.
const validationWebhookName = "validation.webhook.monovertex.numaflow.numaproj.io"

var monoVertexGVK = nf.SchemeGroupVersion.WithKind(nf.Kind)

// admitted is the MonoVertex as knative.dev/pkg's validating webhook
// decodes it. Its own Validate accepts everything: the checks run in
// validateMonoVertex, on the object as it was sent, so that they are
// mvctl's own (decoding with exact field paths, conversion, Knative's
// validation of the Service).
type admitted struct{ nf.MonoVertex }

var _ resourcesemantics.GenericCRD = (*admitted)(nil)

// DeepCopyObject keeps the wrapper (the webhook copies its handler).
func (a *admitted) DeepCopyObject() runtime.Object { return &admitted{*a.MonoVertex.DeepCopy()} }

// SetDefaults does nothing: the CRD's schema carries Numaflow's defaults.
func (*admitted) SetDefaults(context.Context) {}

// Validate accepts: see validateMonoVertex.
func (*admitted) Validate(context.Context) *apis.FieldError { return nil }

// SupportedSubResources limits the webhook to the MonoVertex itself: the
// controller's status writes are not checked again.
func (*admitted) SupportedSubResources() []string { return []string{""} }

// SupportedVerbs are create and update.
func (*admitted) SupportedVerbs() []admissionregistrationv1.OperationType {
	return []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
}

func newValidationController(opts mvconvert.Options) injection.ControllerConstructor {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		check := func(ctx context.Context, u *unstructured.Unstructured) error {
			return validateMonoVertex(u, opts)
		}
		return validation.NewAdmissionController(ctx, validationWebhookName, "/validate-monovertex",
			map[schema.GroupVersionKind]resourcesemantics.GenericCRD{monoVertexGVK: &admitted{}},
			func(ctx context.Context) context.Context { return ctx },
			// Unknown fields are left to validateMonoVertex, which names
			// their whole path (encoding/json names only the key).
			false,
			map[schema.GroupVersionKind]validation.Callback{
				monoVertexGVK: validation.NewCallback(check, webhook.Create, webhook.Update),
			})
	}
}

// validateMonoVertex refuses what `mvctl validate` refuses, with the same
// field path: it decodes the object with mvconvert.ReadDocuments, converts
// it with the controller's options and runs Knative's defaulting and
// validation on the Service (mvconvert.Admit). A MonoVertex being deleted
// is let through, so that its finalizers can be removed.
func validateMonoVertex(u *unstructured.Unstructured, opts mvconvert.Options) error {
	if u.GetDeletionTimestamp() != nil {
		return nil
	}
	obj := u.DeepCopy().Object
	delete(obj, "status")
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	docs, err := mvconvert.ReadDocuments(bytes.NewReader(b))
	if err != nil {
		var de *mvconvert.DocumentError
		if errors.As(err, &de) {
			return de.Err
		}
		return err
	}
	if len(docs) != 1 || docs[0].MonoVertex == nil {
		return fmt.Errorf("not a %s %s", nf.APIVersion, nf.Kind)
	}
	res, err := mvconvert.Convert(docs[0].MonoVertex, opts)
	if err != nil {
		return err
	}
	adm, err := mvconvert.Admit(res.Service, res.SortedFeatures())
	if err != nil {
		return err
	}
	if len(adm.Errors) > 0 {
		return fmt.Errorf("Knative's webhook would reject Service %q: %s", res.Service.Name, strings.Join(adm.Errors, "; "))
	}
	return nil
}
