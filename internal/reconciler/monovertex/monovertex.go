// Package monovertex reconciles a Numaflow MonoVertex into what
// `mvctl convert` makes of it: the runner's Knative Service and its
// ConfigMap, owned by the MonoVertex. The desired state is exactly
// mvconvert.Convert's output; the reconciler adds only the ownerReference
// and the managed-by label its informers filter on.
package monovertex

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/kmeta"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	servingclientset "knative.dev/serving/pkg/client/clientset/versioned"
	servinglisters "knative.dev/serving/pkg/client/listers/serving/v1"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	mvreconciler "github.com/monovertex/monovertex/internal/client/injection/reconciler/numaflow/v1alpha1/monovertex"
	"github.com/monovertex/monovertex/internal/mvconvert"
)

// ManagedByLabel marks the ConfigMaps and Services the controller owns; its
// informers watch only objects with ManagedBySelector.
const (
	ManagedByLabel    = "app.kubernetes.io/managed-by"
	ManagedByValue    = "monovertex-controller"
	ManagedBySelector = ManagedByLabel + "=" + ManagedByValue
)

// PodLabel is the pod template label the converter sets to the MonoVertex's
// name: status.selector (the scale subresource's selector) selects on it.
const PodLabel = "numaflow.numaproj.io/mono-vertex-name"

// Condition types of a MonoVertex's status. Ready is what
// `kubectl wait --for=condition=Ready` waits for: Deployed and
// ServiceReady both true.
const (
	ConditionReady        = "Ready"
	ConditionDeployed     = "Deployed"
	ConditionServiceReady = "ServiceReady"
)

// Reasons written into conditions and status.reason.
const (
	ReasonConversionFailed = "ConversionFailed"
	ReasonNotOwned         = "NotOwned"
	ReasonApplyFailed      = "ApplyFailed"
	ReasonRejected         = "Rejected"
	ReasonDeployed         = "Deployed"
	ReasonServiceReady     = "ServiceReady"
	ReasonServicePending   = "ServiceNotReconciled"
	ReasonPaused           = "Paused"
)

// Reconciler makes the Service and ConfigMap of a MonoVertex match
// mvconvert.Convert's output and writes the MonoVertex's status.
type Reconciler struct {
	Options         mvconvert.Options
	KubeClient      kubernetes.Interface
	ServingClient   servingclientset.Interface
	ConfigMapLister corev1listers.ConfigMapLister
	ServiceLister   servinglisters.ServiceLister
	RevisionLister  servinglisters.RevisionLister
}

var _ mvreconciler.Interface = (*Reconciler)(nil)

// Desired is what the MonoVertex converts into, with the controller's
// ownerReference and managed-by label: the one code path mvctl convert
// takes, on a copy without the fields the API server and the controller
// write (the converter would warn that it drops them).
func Desired(mv *nf.MonoVertex, opts mvconvert.Options) (*mvconvert.Result, error) {
	in := &nf.MonoVertex{TypeMeta: mv.TypeMeta, Spec: *mv.Spec.DeepCopy()}
	in.Name, in.Namespace = mv.Name, mv.Namespace
	in.Labels, in.Annotations = maps.Clone(mv.Labels), maps.Clone(mv.Annotations)
	res, err := mvconvert.Convert(in, opts)
	if err != nil {
		return nil, err
	}
	owner := []metav1.OwnerReference{*kmeta.NewControllerRef(mv)}
	for _, om := range []*metav1.ObjectMeta{&res.ConfigMap.ObjectMeta, &res.Service.ObjectMeta} {
		om.OwnerReferences = owner
		if om.Labels == nil {
			om.Labels = map[string]string{}
		}
		om.Labels[ManagedByLabel] = ManagedByValue
	}
	return res, nil
}

// ReconcileKind converts the MonoVertex, applies the ConfigMap and the
// Service, and reflects the Service's readiness in the status.
func (r *Reconciler) ReconcileKind(ctx context.Context, mv *nf.MonoVertex) pkgreconciler.Event {
	logger := logging.FromContext(ctx)
	st := &mv.Status
	st.ObservedGeneration = mv.Generation
	st.Selector = PodLabel + "=" + mv.Name

	res, err := Desired(mv, r.Options)
	if err != nil {
		msg := err.Error()
		var fe *mvconvert.FieldError
		if !errors.As(err, &fe) {
			msg = "conversion: " + msg
		}
		markFailed(st, ReasonConversionFailed, msg)
		// Permanent until the MonoVertex changes: nothing to retry.
		return controller.NewPermanentError(pkgreconciler.NewEvent(corev1.EventTypeWarning, ReasonConversionFailed, "%s", msg))
	}
	for _, w := range res.Warnings {
		logger.Debugw("conversion warning", "monovertex", mv.Name, "warning", w)
	}
	if err := r.applyConfigMap(ctx, mv, res.ConfigMap); err != nil {
		return r.deployFailed(st, err)
	}
	svc, err := r.applyService(ctx, mv, res.Service)
	if err != nil {
		return r.deployFailed(st, err)
	}
	setCondition(st, ConditionDeployed, metav1.ConditionTrue, ReasonDeployed, fmt.Sprintf("ConfigMap %s and Service %s match the MonoVertex", res.ConfigMap.Name, svc.Name))
	// Paused is what the converter decided (desiredPhase Paused, or
	// spec.replicas 0), read back from its ConfigMap.
	r.propagateService(st, svc, res.ConfigMap.Data["paused"] == "true")
	return nil
}

// ownErr is a Service or ConfigMap of the MonoVertex's name that another
// owner has.
type ownErr struct{ kind, name string }

func (e *ownErr) Error() string {
	return fmt.Sprintf("%s %q exists and is not owned by this MonoVertex", e.kind, e.name)
}

func (r *Reconciler) deployFailed(st *nf.MonoVertexStatus, err error) error {
	var oe *ownErr
	if errors.As(err, &oe) {
		markFailed(st, ReasonNotOwned, err.Error())
		return controller.NewPermanentError(pkgreconciler.NewEvent(corev1.EventTypeWarning, ReasonNotOwned, "%s", err.Error()))
	}
	if apierrs.IsInvalid(err) || apierrs.IsBadRequest(err) {
		// Refused by the API server or Knative's webhook (a feature flag
		// the Service needs, say): retrying the same object cannot help;
		// a change to the MonoVertex or the config-features reconciles
		// again.
		markFailed(st, ReasonRejected, err.Error())
		return controller.NewPermanentError(pkgreconciler.NewEvent(corev1.EventTypeWarning, ReasonRejected, "%s", err.Error()))
	}
	markFailed(st, ReasonApplyFailed, err.Error())
	return err // retried with backoff
}

func (r *Reconciler) applyConfigMap(ctx context.Context, mv *nf.MonoVertex, want *corev1.ConfigMap) error {
	have, err := r.ConfigMapLister.ConfigMaps(want.Namespace).Get(want.Name)
	if apierrs.IsNotFound(err) {
		_, err = r.KubeClient.CoreV1().ConfigMaps(want.Namespace).Create(ctx, want, metav1.CreateOptions{})
		if apierrs.IsAlreadyExists(err) {
			return &ownErr{"ConfigMap", want.Name}
		}
		return err
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(have, mv) {
		return &ownErr{"ConfigMap", want.Name}
	}
	if equality.Semantic.DeepEqual(have.Data, want.Data) && subset(want.Labels, have.Labels) && subset(want.Annotations, have.Annotations) {
		return nil
	}
	upd := have.DeepCopy()
	upd.Data, upd.BinaryData = want.Data, nil
	upd.Labels = mergeInto(upd.Labels, want.Labels)
	upd.Annotations = mergeInto(upd.Annotations, want.Annotations)
	_, err = r.KubeClient.CoreV1().ConfigMaps(want.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	return err
}

func (r *Reconciler) applyService(ctx context.Context, mv *nf.MonoVertex, want *servingv1.Service) (*servingv1.Service, error) {
	have, err := r.ServiceLister.Services(want.Namespace).Get(want.Name)
	if apierrs.IsNotFound(err) {
		got, err := r.ServingClient.ServingV1().Services(want.Namespace).Create(ctx, want, metav1.CreateOptions{})
		if apierrs.IsAlreadyExists(err) {
			return nil, &ownErr{"Service", want.Name}
		}
		return got, err
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(have, mv) {
		return nil, &ownErr{"Service", want.Name}
	}
	// Knative's webhook fills in defaults (container concurrency, probes,
	// timeouts) the converter leaves unset: DeepDerivative compares only
	// what the converter sets, so a defaulted Service is not rewritten on
	// every pass, while a changed or removed field is.
	want = withKnativeDefaults(ctx, want)
	if equality.Semantic.DeepDerivative(want.Spec, have.Spec) && subset(want.Labels, have.Labels) && subset(want.Annotations, have.Annotations) {
		return have, nil
	}
	upd := have.DeepCopy()
	upd.Spec = want.Spec
	// Knative defaults enableServiceLinks on create only; an update that
	// dropped it would roll a revision that differs in nothing else.
	if upd.Spec.Template.Spec.EnableServiceLinks == nil {
		upd.Spec.Template.Spec.EnableServiceLinks = have.Spec.Template.Spec.EnableServiceLinks
	}
	upd.Labels = mergeInto(upd.Labels, want.Labels)
	upd.Annotations = mergeInto(upd.Annotations, want.Annotations)
	return r.ServingClient.ServingV1().Services(want.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
}

// withKnativeDefaults is a copy of want with the defaults Knative's webhook
// writes into fields DeepDerivative cannot take as unset: integers and
// booleans (a readiness probe's successThreshold, failureThreshold and
// timeoutSeconds; readOnly on volume mounts). Knative's own defaulting
// computes them, so they follow its version; pointers, maps and strings
// the converter leaves empty are left so, as DeepDerivative ignores them.
func withKnativeDefaults(ctx context.Context, want *servingv1.Service) *servingv1.Service {
	want = want.DeepCopy()
	d := want.Spec.Template.Spec.DeepCopy()
	d.SetDefaults(ctx)
	for i := range want.Spec.Template.Spec.Containers {
		c, dc := &want.Spec.Template.Spec.Containers[i], &d.Containers[i]
		if c.ReadinessProbe != nil {
			c.ReadinessProbe = dc.ReadinessProbe
		}
		c.VolumeMounts = dc.VolumeMounts
	}
	return want
}

// propagateService carries the Service's readiness, and its latest ready
// revision's replica counts, into the MonoVertex's status.
func (r *Reconciler) propagateService(st *nf.MonoVertexStatus, svc *servingv1.Service, paused bool) {
	phase := nf.PhaseRunning
	if paused {
		phase = nf.PhasePaused
	}
	st.Phase = phase
	st.Reason, st.Message = "", ""
	if paused {
		st.Reason, st.Message = ReasonPaused, "MonoVertex paused"
	}

	st.Replicas, st.DesiredReplicas, st.ReadyReplicas = 0, 0, 0
	if name := svc.Status.LatestReadyRevisionName; name != "" && r.RevisionLister != nil {
		if rev, err := r.RevisionLister.Revisions(svc.Namespace).Get(name); err == nil {
			if n := rev.Status.ActualReplicas; n != nil && *n > 0 {
				st.Replicas, st.ReadyReplicas = uint32(*n), uint32(*n)
			}
			if n := rev.Status.DesiredReplicas; n != nil && *n > 0 {
				st.DesiredReplicas = uint32(*n)
			}
		}
	}

	ready := svc.Status.GetCondition(servingv1.ServiceConditionReady)
	switch {
	case svc.Generation != svc.Status.ObservedGeneration || ready == nil:
		setCondition(st, ConditionServiceReady, metav1.ConditionUnknown, ReasonServicePending, fmt.Sprintf("Knative has not yet reconciled generation %d of Service %s", svc.Generation, svc.Name))
	case ready.IsTrue():
		setCondition(st, ConditionServiceReady, metav1.ConditionTrue, ReasonServiceReady, fmt.Sprintf("Service %s is Ready at %s", svc.Name, svc.Status.URL))
	default:
		status := metav1.ConditionUnknown
		if ready.IsFalse() {
			status = metav1.ConditionFalse
		}
		reason := conditionReason(string(ready.Reason), ReasonServicePending)
		msg := ready.Message
		if msg == "" {
			msg = "Service " + svc.Name + " is not Ready"
		}
		setCondition(st, ConditionServiceReady, status, reason, msg)
		if !paused {
			st.Reason, st.Message = reason, "Degraded: "+msg
		}
	}
	sr := findCondition(st, ConditionServiceReady)
	setCondition(st, ConditionReady, sr.Status, sr.Reason, sr.Message)
}

func markFailed(st *nf.MonoVertexStatus, reason, msg string) {
	st.Phase, st.Reason, st.Message = nf.PhaseFailed, reason, msg
	setCondition(st, ConditionDeployed, metav1.ConditionFalse, reason, msg)
	setCondition(st, ConditionReady, metav1.ConditionFalse, reason, msg)
}

// conditionReason makes s a valid metav1.Condition reason (Numaflow's CRD
// requires ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$), else def.
func conditionReason(s, def string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return -1
	}, s)
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return def
	}
	return s
}

// maxMessage is the longest condition message the CRD's schema takes.
const maxMessage = 32768

// setCondition sets one condition, keeping its transition time when its
// status does not change (as meta.SetStatusCondition does). The message
// is required by the CRD's schema, so it is never empty, and cut to its
// limit, or the status write would fail.
func setCondition(st *nf.MonoVertexStatus, typ string, status metav1.ConditionStatus, reason, msg string) {
	if msg == "" {
		msg = reason
	}
	if len(msg) > maxMessage {
		msg = strings.ToValidUTF8(msg[:maxMessage-3], "") + "..."
	}
	c := metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
	for i := range st.Conditions {
		if st.Conditions[i].Type != typ {
			continue
		}
		if st.Conditions[i].Status == status {
			c.LastTransitionTime = st.Conditions[i].LastTransitionTime
		}
		st.Conditions[i] = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

func findCondition(st *nf.MonoVertexStatus, typ string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

// subset reports whether every key of want has its value in have.
func subset(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func mergeInto(dst, src map[string]string) map[string]string {
	if dst == nil && len(src) > 0 {
		dst = map[string]string{}
	}
	maps.Copy(dst, src)
	return dst
}
