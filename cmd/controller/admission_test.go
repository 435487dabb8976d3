package main

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	_ "knative.dev/pkg/client/injection/kube/client/fake"
	_ "knative.dev/pkg/client/injection/kube/informers/admissionregistration/v1/validatingwebhookconfiguration/fake"
	_ "knative.dev/pkg/injection/clients/namespacedkube/informers/core/v1/secret/fake"
	pkgtesting "knative.dev/pkg/reconciler/testing"
	_ "knative.dev/pkg/system/testing"
	"knative.dev/pkg/webhook"

	"github.com/monovertex/monovertex/internal/mvconvert"
)

// TestAdmissionThroughKnativeWebhook sends AdmissionRequests through
// knative.dev/pkg's validating admission controller as the webhook
// serves them: the corpus MonoVertex is allowed, rateLimit min > max is
// refused with the path, and so is a misspelt field (the API server
// refuses it first, with kubectl's default strict field validation).
func TestAdmissionThroughKnativeWebhook(t *testing.T) {
	ctx, _ := pkgtesting.SetupFakeContext(t)
	ctx = webhook.WithOptions(ctx, webhook.Options{ServiceName: webhookServiceName, SecretName: webhookSecretName, Port: 8443})
	impl := newValidationController(mvconvert.Options{})(ctx, nil)
	ac, ok := impl.Reconciler.(webhook.AdmissionController)
	if !ok {
		t.Fatalf("%T is not an admission controller", impl.Reconciler)
	}
	if ac.Path() != "/validate-monovertex" {
		t.Errorf("path %q", ac.Path())
	}
	good := corpusObject(t, "../mvctl/testdata/corpus/generator-log.yaml")
	bad := good.DeepCopy()
	bad.Object["spec"].(map[string]any)["limits"].(map[string]any)["rateLimit"] = map[string]any{"min": int64(10), "max": int64(5)}
	misspelt := good.DeepCopy()
	misspelt.Object["spec"].(map[string]any)["limits"].(map[string]any)["readBatchSise"] = int64(5)
	raw := func(o runtime.Object) []byte {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		op     admissionv1.Operation
		obj    []byte
		old    []byte
		allow  bool
		reason string
	}{
		{"create corpus", admissionv1.Create, raw(good), nil, true, ""},
		{"create rateLimit min above max", admissionv1.Create, raw(bad), nil, false, "spec.limits.rateLimit.min: 10 is more than max (5)"},
		{"create misspelt", admissionv1.Create, raw(misspelt), nil, false, `validation callback failed: spec.limits.readBatchSise: unknown field (did you mean "readBatchSize"?)`},
		{"update to rateLimit min above max", admissionv1.Update, raw(bad), raw(good), false, "spec.limits.rateLimit.min: 10 is more than max (5)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &admissionv1.AdmissionRequest{
				Operation: tc.op,
				Kind:      metav1.GroupVersionKind{Group: monoVertexGVK.Group, Version: monoVertexGVK.Version, Kind: monoVertexGVK.Kind},
				Resource:  metav1.GroupVersionResource{Group: monoVertexGVK.Group, Version: monoVertexGVK.Version, Resource: "monovertices"},
				Namespace: "streams",
				Name:      "generator-log",
			}
			req.Object.Raw = tc.obj
			req.OldObject.Raw = tc.old
			resp := ac.Admit(ctx, req)
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			if resp.Allowed != tc.allow || !strings.Contains(msg, tc.reason) {
				t.Errorf("allowed %t (%q), want %t with %q", resp.Allowed, msg, tc.allow, tc.reason)
			}
			t.Logf("allowed %t: %s", resp.Allowed, msg)
		})
	}
}
