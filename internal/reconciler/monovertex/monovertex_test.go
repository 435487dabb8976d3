package monovertex

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	cmfiltered "knative.dev/pkg/client/injection/kube/informers/core/v1/configmap/filtered"
	_ "knative.dev/pkg/client/injection/kube/informers/core/v1/configmap/filtered/fake"
	filtered "knative.dev/pkg/client/injection/kube/informers/factory/filtered"
	_ "knative.dev/pkg/client/injection/kube/informers/factory/filtered/fake"
	"knative.dev/pkg/controller"
	pkgreconciler "knative.dev/pkg/reconciler"
	pkgtesting "knative.dev/pkg/reconciler/testing"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	fakeservingclient "knative.dev/serving/pkg/client/injection/client/fake"
	_ "knative.dev/serving/pkg/client/injection/informers/serving/v1/revision/fake"
	fakeserviceinformer "knative.dev/serving/pkg/client/injection/informers/serving/v1/service/fake"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	fakemvclient "github.com/monovertex/monovertex/internal/client/injection/client/fake"
	fakemvinformer "github.com/monovertex/monovertex/internal/client/injection/informers/numaflow/v1alpha1/monovertex/fake"
	"github.com/monovertex/monovertex/internal/mvconvert"
)

// corpusMonoVertex decodes one of mvctl's corpus manifests, as an object
// the API server stored (uid, generation).
func corpusMonoVertex(t *testing.T, name string) *nf.MonoVertex {
	t.Helper()
	f, err := os.Open("../../../cmd/mvctl/testdata/corpus/" + name + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	docs, err := mvconvert.ReadDocuments(f)
	if err != nil || len(docs) != 1 || docs[0].MonoVertex == nil {
		t.Fatalf("corpus %s: %d documents, %v", name, len(docs), err)
	}
	mv := docs[0].MonoVertex
	mv.UID = types.UID("uid-" + name)
	mv.Generation = 3
	return mv
}

// env is one reconciler over fake clients and informers.
type env struct {
	ctx context.Context
	r   controller.Reconciler
}

// newEnv seeds the informers' caches and the fake clients with objs and
// builds the controller as sharedmain would.
func newEnv(t *testing.T, objs ...runtime.Object) *env {
	t.Helper()
	ctx, _ := pkgtesting.SetupFakeContext(t, func(ctx context.Context) context.Context {
		return filtered.WithSelectors(ctx, ManagedBySelector)
	})
	impl := NewController(mvconvert.Options{})(ctx, nil)
	for _, o := range objs {
		var err error
		switch x := o.(type) {
		case *nf.MonoVertex:
			_, err = fakemvclient.Get(ctx).NumaflowV1alpha1().MonoVertexes(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
			if err == nil {
				err = fakemvinformer.Get(ctx).Informer().GetIndexer().Add(x)
			}
		case *servingv1.Service:
			_, err = fakeservingclient.Get(ctx).ServingV1().Services(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
			if err == nil {
				err = fakeserviceinformer.Get(ctx).Informer().GetIndexer().Add(x)
			}
		case *corev1.ConfigMap:
			_, err = fakekubeclient.Get(ctx).CoreV1().ConfigMaps(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
			if err == nil {
				err = cmfiltered.Get(ctx, ManagedBySelector).Informer().GetIndexer().Add(x)
			}
		default:
			t.Fatalf("cannot seed %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Only the leader reconciles; the tests are the only replica.
	if la, ok := impl.Reconciler.(pkgreconciler.LeaderAware); ok {
		if err := la.Promote(pkgreconciler.UniversalBucket(), func(pkgreconciler.Bucket, types.NamespacedName) {}); err != nil {
			t.Fatal(err)
		}
	}
	fakekubeclient.Get(ctx).ClearActions()
	fakeservingclient.Get(ctx).ClearActions()
	fakemvclient.Get(ctx).ClearActions()
	return &env{ctx: ctx, r: impl.Reconciler}
}

// reconcile runs one pass over mv and returns its error and the MonoVertex
// as the fake API server holds it afterwards (with the written status).
func (e *env) reconcile(t *testing.T, mv *nf.MonoVertex) (error, *nf.MonoVertex) {
	t.Helper()
	err := e.r.Reconcile(e.ctx, mv.Namespace+"/"+mv.Name)
	got, gerr := fakemvclient.Get(e.ctx).NumaflowV1alpha1().MonoVertexes(mv.Namespace).Get(e.ctx, mv.Name, metav1.GetOptions{})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return err, got
}

// writes lists the create and update actions of the kube and serving
// clients, as "verb resource name".
func (e *env) writes() []string {
	var out []string
	acts := append(fakekubeclient.Get(e.ctx).Actions(), fakeservingclient.Get(e.ctx).Actions()...)
	for _, a := range acts {
		// An UpdateAction is a CreateAction too (both carry the object),
		// so the verb tells them apart.
		if x, ok := a.(clientgotesting.CreateAction); ok && (a.GetVerb() == "create" || a.GetVerb() == "update") {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource+" "+x.GetObject().(metav1.Object).GetName())
		}
	}
	return out
}

func (e *env) service(t *testing.T, ns, name string) *servingv1.Service {
	t.Helper()
	s, err := fakeservingclient.Get(e.ctx).ServingV1().Services(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) configMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	c, err := fakekubeclient.Get(e.ctx).CoreV1().ConfigMaps(ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func condition(mv *nf.MonoVertex, typ string) metav1.Condition {
	for _, c := range mv.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func runnerEnv(svc *servingv1.Service, name string) string {
	for _, e := range svc.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// existing returns the objects a previous reconcile of mv wrote, the
// Service as Knative's webhook stored it (its own defaulting code).
func existing(t *testing.T, mv *nf.MonoVertex) (*corev1.ConfigMap, *servingv1.Service) {
	t.Helper()
	res, err := Desired(mv, mvconvert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res.Service.SetDefaults(apis.WithinCreate(context.Background()))
	return res.ConfigMap, res.Service
}

func TestReconcileCreatesWhatConvertProduces(t *testing.T) {
	mv := corpusMonoVertex(t, "generator-log")
	e := newEnv(t, mv)
	err, got := e.reconcile(t, mv)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if w, want := e.writes(), []string{"create configmaps generator-log-config", "create services generator-log"}; strings.Join(w, ",") != strings.Join(want, ",") {
		t.Fatalf("writes %q, want %q", w, want)
	}
	// Exactly mvctl convert's output, plus the owner and the label.
	plain, err := mvconvert.Convert(corpusMonoVertex(t, "generator-log"), mvconvert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := e.service(t, "streams", "generator-log")
	if !equality.Semantic.DeepEqual(svc.Spec, plain.Service.Spec) {
		t.Errorf("Service spec differs from mvconvert.Convert's")
	}
	cm := e.configMap(t, "streams", "generator-log-config")
	if !equality.Semantic.DeepEqual(cm.Data, plain.ConfigMap.Data) || cm.Data["paused"] != "false" {
		t.Errorf("ConfigMap data %v, want %v with paused false", cm.Data, plain.ConfigMap.Data)
	}
	for _, o := range []metav1.Object{svc, cm} {
		if !metav1.IsControlledBy(o, mv) {
			t.Errorf("%s: owners %v, want the MonoVertex as controller", o.GetName(), o.GetOwnerReferences())
		}
		if o.GetLabels()[ManagedByLabel] != ManagedByValue || o.GetLabels()["team"] != "ingest" {
			t.Errorf("%s: labels %v", o.GetName(), o.GetLabels())
		}
	}
	if runnerEnv(svc, "MV_READ_BATCH_SIZE") != "100" {
		t.Errorf("MV_READ_BATCH_SIZE %q, want 100", runnerEnv(svc, "MV_READ_BATCH_SIZE"))
	}
	st := got.Status
	if st.Phase != nf.PhaseRunning || st.ObservedGeneration != 3 || st.Selector != PodLabel+"=generator-log" {
		t.Errorf("status phase %q observedGeneration %d selector %q", st.Phase, st.ObservedGeneration, st.Selector)
	}
	if c := condition(got, ConditionDeployed); c.Status != metav1.ConditionTrue || c.Reason != ReasonDeployed {
		t.Errorf("Deployed %+v", c)
	}
	// Knative has not reconciled the new Service yet.
	if c := condition(got, ConditionReady); c.Status != metav1.ConditionUnknown || c.Reason != ReasonServicePending {
		t.Errorf("Ready %+v", c)
	}
}

func TestReconcileUpdatesAChangedField(t *testing.T) {
	old := corpusMonoVertex(t, "generator-log")
	cm, svc := existing(t, old)
	// Knative's webhook defaults fields the converter leaves unset; they
	// must not count as a difference.
	svc.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent

	t.Run("unchanged", func(t *testing.T) {
		e := newEnv(t, old.DeepCopy(), cm.DeepCopy(), svc.DeepCopy())
		if err, _ := e.reconcile(t, old); err != nil {
			t.Fatal(err)
		}
		if w := e.writes(); len(w) != 0 {
			t.Errorf("writes %q to an up-to-date, defaulted Service, want none", w)
		}
	})
	t.Run("readBatchSize 100 to 7", func(t *testing.T) {
		mv := old.DeepCopy()
		n := uint64(7)
		mv.Spec.Limits.ReadBatchSize = &n
		mv.Generation++
		e := newEnv(t, mv, cm.DeepCopy(), svc.DeepCopy())
		err, got := e.reconcile(t, mv)
		if err != nil {
			t.Fatal(err)
		}
		if w := e.writes(); strings.Join(w, ",") != "update services generator-log" {
			t.Fatalf("writes %q, want the Service's update only", w)
		}
		if v := runnerEnv(e.service(t, "streams", "generator-log"), "MV_READ_BATCH_SIZE"); v != "7" {
			t.Errorf("MV_READ_BATCH_SIZE %q after the update, want 7", v)
		}
		if got.Status.ObservedGeneration != 4 {
			t.Errorf("observedGeneration %d, want 4", got.Status.ObservedGeneration)
		}
		// Knative sets it on create only: dropped, it would roll one
		// more revision.
		if l := e.service(t, "streams", "generator-log").Spec.Template.Spec.EnableServiceLinks; l == nil || *l {
			t.Errorf("enableServiceLinks %v after the update, want false as Knative set it on create", l)
		}
	})
}

// TestKnativeDefaultedServiceIsLeftAlone: each corpus MonoVertex's Service,
// as Knative's own defaulting (the webhook's code) stores it on create, is
// up to date: no write, so no second revision after the first.
func TestKnativeDefaultedServiceIsLeftAlone(t *testing.T) {
	names := []string{"generator-log", "generator-blob-log", "http-blackhole", "udf-onsuccess-bypass", "udsource-transformer-udsink", "jetstream-log", "kafka-oauth", "sqs-source-log"}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			mv := corpusMonoVertex(t, name)
			cm, svc := existing(t, mv)
			if svc.Spec.Template.Spec.EnableServiceLinks == nil {
				t.Fatal("Knative's create defaults did not run")
			}
			e := newEnv(t, mv, cm, svc)
			if err, _ := e.reconcile(t, mv); err != nil {
				t.Fatal(err)
			}
			if w := e.writes(); len(w) != 0 {
				t.Errorf("writes %q to a Service as Knative stored it, want none", w)
			}
		})
	}
}

func TestPauseChangesOnlyTheConfigMap(t *testing.T) {
	running := corpusMonoVertex(t, "generator-log")
	cm, svc := existing(t, running)
	paused := running.DeepCopy()
	paused.Spec.Lifecycle.DesiredPhase = nf.PhasePaused
	paused.Generation++
	e := newEnv(t, paused, cm, svc.DeepCopy())
	err, got := e.reconcile(t, paused)
	if err != nil {
		t.Fatal(err)
	}
	if w := e.writes(); strings.Join(w, ",") != "update configmaps generator-log-config" {
		t.Fatalf("writes %q, want the ConfigMap's update only", w)
	}
	if v := e.configMap(t, "streams", "generator-log-config").Data["paused"]; v != "true" {
		t.Errorf("paused %q, want true", v)
	}
	if after := e.service(t, "streams", "generator-log"); !equality.Semantic.DeepEqual(after.Spec.Template, svc.Spec.Template) {
		t.Error("pausing changed the Service's template (a new revision, new pods)")
	}
	if got.Status.Phase != nf.PhasePaused || got.Status.Reason != ReasonPaused {
		t.Errorf("phase %q reason %q, want Paused", got.Status.Phase, got.Status.Reason)
	}
}

func TestConversionFailureMarksFailed(t *testing.T) {
	mv := corpusMonoVertex(t, "generator-log")
	mv.Spec.Lifecycle.DesiredPhase = "Stopped"
	e := newEnv(t, mv)
	err, got := e.reconcile(t, mv)
	if err == nil || !controller.IsPermanentError(err) {
		t.Errorf("reconcile error %v, want a permanent one", err)
	}
	if w := e.writes(); len(w) != 0 {
		t.Errorf("writes %q for a MonoVertex that does not convert", w)
	}
	want := `spec.lifecycle.desiredPhase: "Stopped": want Running or Paused`
	if got.Status.Phase != nf.PhaseFailed || got.Status.Reason != ReasonConversionFailed || got.Status.Message != want {
		t.Errorf("status phase %q reason %q message %q, want Failed %s %q", got.Status.Phase, got.Status.Reason, got.Status.Message, ReasonConversionFailed, want)
	}
	if c := condition(got, ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != ReasonConversionFailed || c.Message != want {
		t.Errorf("Ready %+v", c)
	}
}

func TestServiceNotReadyReasonIsCarried(t *testing.T) {
	mv := corpusMonoVertex(t, "generator-log")
	cm, svc := existing(t, mv)
	svc.Generation, svc.Status.ObservedGeneration = 1, 1
	svc.Status.Conditions = duckv1.Conditions{{
		Type: apis.ConditionReady, Status: corev1.ConditionFalse,
		Reason: "RevisionFailed", Message: `Revision "generator-log-00001" failed with message: Back-off pulling image.`,
	}}
	e := newEnv(t, mv, cm, svc)
	err, got := e.reconcile(t, mv)
	if err != nil {
		t.Fatal(err)
	}
	c := condition(got, ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != "RevisionFailed" || !strings.Contains(c.Message, "Back-off pulling image") {
		t.Errorf("Ready %+v, want False with the Service's reason and message", c)
	}
	if got.Status.Reason != "RevisionFailed" || got.Status.Phase != nf.PhaseRunning {
		t.Errorf("phase %q reason %q", got.Status.Phase, got.Status.Reason)
	}

	// Ready once Knative says so.
	svc.Status.Conditions = duckv1.Conditions{{Type: apis.ConditionReady, Status: corev1.ConditionTrue}}
	e = newEnv(t, mv, cm, svc)
	if err, got = e.reconcile(t, mv); err != nil {
		t.Fatal(err)
	}
	if c := condition(got, ConditionReady); c.Status != metav1.ConditionTrue || c.Reason != ReasonServiceReady {
		t.Errorf("Ready %+v, want True", c)
	}
}

func TestServiceOfAnotherOwnerIsLeftAlone(t *testing.T) {
	mv := corpusMonoVertex(t, "generator-log")
	_, svc := existing(t, mv)
	svc.OwnerReferences = nil
	e := newEnv(t, mv, svc)
	err, got := e.reconcile(t, mv)
	if err == nil || !controller.IsPermanentError(err) {
		t.Errorf("reconcile error %v, want a permanent one", err)
	}
	if w := e.writes(); strings.Join(w, ",") != "create configmaps generator-log-config" {
		t.Errorf("writes %q, want only the ConfigMap's create", w)
	}
	if got.Status.Reason != ReasonNotOwned || got.Status.Phase != nf.PhaseFailed {
		t.Errorf("phase %q reason %q, want Failed %s", got.Status.Phase, got.Status.Reason, ReasonNotOwned)
	}
}

func TestServiceRejectedByKnativeIsPermanent(t *testing.T) {
	mv := corpusMonoVertex(t, "generator-log")
	e := newEnv(t, mv)
	msg := `admission webhook "validation.webhook.serving.knative.dev" denied the request: validation failed: must not set the field(s): spec.template.spec.nodeSelector`
	fakeservingclient.Get(e.ctx).PrependReactor("create", "services", func(clientgotesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrs.NewBadRequest(msg)
	})
	err, got := e.reconcile(t, mv)
	if err == nil || !controller.IsPermanentError(err) {
		t.Errorf("reconcile error %v, want a permanent one", err)
	}
	if got.Status.Phase != nf.PhaseFailed || got.Status.Reason != ReasonRejected || got.Status.Message != msg {
		t.Errorf("phase %q reason %q message %q", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	if c := condition(got, ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != ReasonRejected {
		t.Errorf("Ready %+v", c)
	}
}

func TestLongMessageFitsTheSchema(t *testing.T) {
	var st nf.MonoVertexStatus
	setCondition(&st, ConditionReady, metav1.ConditionFalse, "X", strings.Repeat("é", maxMessage))
	if n := len(st.Conditions[0].Message); n > maxMessage || n < maxMessage-8 {
		t.Errorf("message of %d bytes, want at most %d", n, maxMessage)
	}
}
