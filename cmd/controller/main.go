// Command controller runs Numaflow MonoVertex objects as Knative Services:
// `kubectl apply` a MonoVertex and it reconciles it into exactly what
// `mvctl convert` makes of it (internal/reconciler/monovertex), with
// knative.dev/pkg's sharedmain (leader election, informers, logging). The
// same process serves the validating webhook, which refuses what
// `mvctl validate` refuses.
//
// Environment (besides knative.dev/pkg's SYSTEM_NAMESPACE and friends):
//
//	MV_CONTROLLER_RUNNER_IMAGE        the runner's image (required; ko resolves it)
//	MV_CONTROLLER_SCALER              hpa (default) or keda, as mvctl --scaler
//	MV_CONTROLLER_PROMETHEUS_ADDRESS  Prometheus KEDA queries (--scaler keda)
//	MV_CONTROLLER_ROLLOUT_DURATION    as mvctl --rollout-duration
//	WEBHOOK_PORT                      the webhook's port (8443)
//
// Invalid configuration exits 2 with one stderr line naming the variable.
package main

import (
	"fmt"
	"os"
	"regexp"

	filteredFactory "knative.dev/pkg/client/injection/kube/informers/factory/filtered"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/signals"
	"knative.dev/pkg/webhook"
	"knative.dev/pkg/webhook/certificates"

	"github.com/monovertex/monovertex/internal/mvconvert"
	"github.com/monovertex/monovertex/internal/reconciler/monovertex"
)

// Names the deploy/controller manifests use.
const (
	component          = "monovertex-controller"
	webhookServiceName = "monovertex-webhook"
	webhookSecretName  = "monovertex-webhook-certs"
)

func main() {
	opts, err := optionsFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller: "+err.Error())
		os.Exit(2)
	}
	ctx := signals.NewContext()
	// The ConfigMap informer watches only the ConfigMaps the controller
	// made, not every ConfigMap of the cluster.
	ctx = filteredFactory.WithSelectors(ctx, monovertex.ManagedBySelector)
	ctx = webhook.WithOptions(ctx, webhook.Options{
		ServiceName: webhookServiceName,
		Port:        webhook.PortFromEnv(8443),
		SecretName:  webhookSecretName,
	})
	sharedmain.MainWithContext(ctx, component,
		certificates.NewController,
		newValidationController(opts),
		monovertex.NewController(opts),
	)
}

var rolloutRE = regexp.MustCompile(`^[0-9]+(s|m|h)$`)

// optionsFromEnv reads the converter's options, as mvctl's flags set them.
// The controller writes no PodMonitor: the Prometheus Operator's CRD may
// not be installed, and a failed create would hold up the Service.
func optionsFromEnv(getenv func(string) string) (mvconvert.Options, error) {
	o := mvconvert.Options{
		RunnerImage:       getenv("MV_CONTROLLER_RUNNER_IMAGE"),
		Scaler:            getenv("MV_CONTROLLER_SCALER"),
		PrometheusAddress: getenv("MV_CONTROLLER_PROMETHEUS_ADDRESS"),
		RolloutDuration:   getenv("MV_CONTROLLER_ROLLOUT_DURATION"),
	}
	if o.RunnerImage == "" {
		return o, fmt.Errorf("MV_CONTROLLER_RUNNER_IMAGE is not set: want the runner's image (ko://github.com/monovertex/monovertex/cmd/runner in deploy/controller)")
	}
	switch o.Scaler {
	case "":
		o.Scaler = mvconvert.ScalerHPA
	case mvconvert.ScalerHPA, mvconvert.ScalerKEDA:
	default:
		return o, fmt.Errorf("MV_CONTROLLER_SCALER=%q: want hpa or keda", o.Scaler)
	}
	if d := o.RolloutDuration; d != "" && !rolloutRE.MatchString(d) {
		return o, fmt.Errorf("MV_CONTROLLER_ROLLOUT_DURATION=%q: want whole seconds, minutes or hours such as 120s", d)
	}
	return o, nil
}
