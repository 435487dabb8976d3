package monovertex

import (
	"context"

	"k8s.io/client-go/tools/cache"
	kubeclient "knative.dev/pkg/client/injection/kube/client"
	cmfiltered "knative.dev/pkg/client/injection/kube/informers/core/v1/configmap/filtered"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection"
	"knative.dev/serving/pkg/apis/serving"
	servingclient "knative.dev/serving/pkg/client/injection/client"
	revisioninformer "knative.dev/serving/pkg/client/injection/informers/serving/v1/revision"
	serviceinformer "knative.dev/serving/pkg/client/injection/informers/serving/v1/service"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	mvinformer "github.com/monovertex/monovertex/internal/client/injection/informers/numaflow/v1alpha1/monovertex"
	mvreconciler "github.com/monovertex/monovertex/internal/client/injection/reconciler/numaflow/v1alpha1/monovertex"
	"github.com/monovertex/monovertex/internal/mvconvert"
)

// NewController returns the constructor sharedmain runs: a MonoVertex
// reconciler, re-run when the MonoVertex, a Service or ConfigMap it owns,
// or a revision of its Service changes. The ConfigMap informer watches only
// ManagedBySelector (the context must carry it: filtered.WithSelectors).
func NewController(opts mvconvert.Options) injection.ControllerConstructor {
	return func(ctx context.Context, _ configmap.Watcher) *controller.Impl {
		mvInformer := mvinformer.Get(ctx)
		svcInformer := serviceinformer.Get(ctx)
		revInformer := revisioninformer.Get(ctx)
		cmInformer := cmfiltered.Get(ctx, ManagedBySelector)

		r := &Reconciler{
			Options:         opts,
			KubeClient:      kubeclient.Get(ctx),
			ServingClient:   servingclient.Get(ctx),
			ConfigMapLister: cmInformer.Lister(),
			ServiceLister:   svcInformer.Lister(),
			RevisionLister:  revInformer.Lister(),
		}
		impl := mvreconciler.NewImpl(ctx, r)

		mvInformer.Informer().AddEventHandler(controller.HandleAll(impl.Enqueue))
		owned := cache.FilteringResourceEventHandler{
			FilterFunc: controller.FilterController(&nf.MonoVertex{}),
			Handler:    controller.HandleAll(impl.EnqueueControllerOf),
		}
		svcInformer.Informer().AddEventHandler(owned)
		cmInformer.Informer().AddEventHandler(owned)
		// A revision's replica counts feed status.replicas; the Service
		// has the MonoVertex's name and namespace.
		revInformer.Informer().AddEventHandler(controller.HandleAll(
			impl.EnqueueLabelOfNamespaceScopedResource("", serving.ServiceLabelKey)))
		return impl
	}
}
