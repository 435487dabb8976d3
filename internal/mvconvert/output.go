package mvconvert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	authv1 "k8s.io/api/authentication/v1"
	"knative.dev/pkg/apis"
	"knative.dev/serving/pkg/apis/config"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"
)

// MarshalYAML writes objects as a multi-document YAML stream, with the
// empty fields Go's types add (creationTimestamp: null, status: {}) left
// out.
func MarshalYAML(objs []any) ([]byte, error) {
	var out bytes.Buffer
	for i, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			return nil, err
		}
		var tree any
		if err := json.Unmarshal(b, &tree); err != nil {
			return nil, err
		}
		y, err := yaml.Marshal(prune(tree, true))
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(y)
	}
	return out.Bytes(), nil
}

// prune drops nulls, empty objects under "status", and creationTimestamp
// nulls; top is true for the object itself.
func prune(v any, top bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			if m, ok := e.(map[string]any); ok && len(m) == 0 && k == "status" {
				delete(x, k)
				continue
			}
			x[k] = prune(e, false)
		}
		// A probe's port 0 is "the serving port" to Knative; leave it out
		// as a hand-written manifest would.
		for _, k := range []string{"httpGet", "tcpSocket"} {
			if h, ok := x[k].(map[string]any); ok {
				if p, ok := h["port"].(float64); ok && p == 0 {
					delete(h, "port")
				}
			}
		}
		if top {
			delete(x, "status")
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = prune(e, false)
		}
	}
	return v
}

// Admission is what Knative's webhook says about a Service.
type Admission struct {
	// Errors would make the webhook reject the Service; Warnings are
	// what it would answer with warnings (one line each).
	Errors, Warnings []string
}

// Admit runs knative.dev/serving v0.50.0's SetDefaults and Validate on a
// Service as the admission webhook does on create, with the default
// config-defaults and config-autoscaler and the config-features flags
// named in features enabled (the ones the conversion asked for, with a
// warning each). The Service is decoded strictly from its YAML first, as
// the API server does.
func Admit(svc *servingv1.Service, features []string) (*Admission, error) {
	b, err := MarshalYAML([]any{svc})
	if err != nil {
		return nil, err
	}
	var decoded servingv1.Service
	if err := yaml.UnmarshalStrict(b, &decoded); err != nil {
		return &Admission{Errors: []string{"does not decode into knative.dev/serving v1 types: " + err.Error()}}, nil
	}
	flags := map[string]string{}
	for _, f := range features {
		flags[f] = "enabled"
	}
	feats, err := config.NewFeaturesConfigFromMap(flags)
	if err != nil {
		return nil, fmt.Errorf("config-features %v: %w", flags, err)
	}
	ctx := config.ToContext(context.Background(), &config.Config{Features: feats})
	ctx = apis.WithinCreate(ctx)
	ctx = apis.WithUserInfo(ctx, &authv1.UserInfo{Username: "system:serviceaccount:default:mvctl"})
	decoded.SetDefaults(ctx)
	fe := decoded.Validate(ctx)
	a := &Admission{}
	if errs := fe.Filter(apis.ErrorLevel); errs != nil {
		a.Errors = lines(errs.Error())
	}
	if warns := fe.Filter(apis.WarningLevel); warns != nil {
		a.Warnings = lines(warns.Error())
	}
	return a, nil
}

// lines splits a Knative FieldError's text into one line per problem.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
