package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// tlsSecret is a kubernetes.io/tls Secret for the DNS names, as
// cert-manager writes it from a Certificate (with the CA in ca.crt, which
// Eventing hands out as the address's CACerts). cert-manager is not built
// on this cluster and Eventing reads only the Secrets it would write
// (config/brokers/mt-channel-broker-tls,
// config/channels/in-memory-channel-tls).
func tlsSecret(ca *testutil.TestCA, ns, name string, names ...string) string {
	crt, key := ca.Issue(names[0], x509.ExtKeyUsageServerAuth, nil, names...)
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %s
  namespace: %s
type: kubernetes.io/tls
data:
  ca.crt: %s
  tls.crt: %s
  tls.key: %s
`, name, ns, b64(ca.PEM), b64(crt), b64(key))
}

// eventingFeatures sets Knative Eventing's config-features keys and puts
// the previous values back when the test ends.
func (c *cluster) eventingFeatures(set map[string]string) {
	c.t.Helper()
	restore := map[string]any{}
	for k := range set {
		old, _ := c.try(30*time.Second, "kubectl", "-n", "knative-eventing", "get", "configmap", "config-features", "-o", "jsonpath={.data."+k+"}")
		if old == "" {
			restore[k] = nil
		} else {
			restore[k] = old
		}
	}
	patch := func(m any) {
		b, _ := json.Marshal(map[string]any{"data": m})
		c.run(30*time.Second, "kubectl", "-n", "knative-eventing", "patch", "configmap", "config-features", "--type", "merge", "-p", string(b))
	}
	c.t.Cleanup(func() { patch(restore) })
	patch(set)
}

// restartEventingDataPlane restarts the Broker's ingress and filter and
// the in-memory channel's dispatcher and waits for them.
func (c *cluster) restartEventingDataPlane() {
	deploys := []string{"deploy/mt-broker-ingress", "deploy/mt-broker-filter", "deploy/imc-dispatcher"}
	c.run(time.Minute, "kubectl", append([]string{"-n", "knative-eventing", "rollout", "restart"}, deploys...)...)
	for _, d := range deploys {
		c.run(200*time.Second, "kubectl", "-n", "knative-eventing", "rollout", "status", d, "--timeout=190s")
	}
}

// brokerReceiverCounts is tlsreceiver's GET /count.
type brokerReceiverCounts struct {
	Requests, Unique, Bearer int
	Types                    map[string]int
}

// receiverCounts fetches tlsreceiver's counts through a port-forward.
func receiverCounts(t *testing.T, base string) brokerReceiverCounts {
	t.Helper()
	code, body := testutil.Get(t, base+"/count")
	var got brokerReceiverCounts
	if code != http.StatusOK || json.Unmarshal(body, &got) != nil {
		t.Fatalf("GET %s/count: %d %s", base, code, body)
	}
	return got
}

// TestBrokerTransportEncryptionAndOIDC: Knative Eventing with
// transport-encryption strict and authentication-oidc enabled. A runner
// bound to a Broker by a SinkBinding (K_SINK https, K_CA_CERTS, the OIDC
// token at /oidc/token, all injected by Eventing) sends events; a Trigger
// delivers them over https to a receiver. Once 400 arrived the runner is
// paused through its ConfigMap, and then the receiver holds each event the
// runner wrote exactly once (by id), and the runner acked what it wrote.
// Requests to the Broker without a token, or with a forged one, are
// refused with 401, and plain http is refused under strict.
func TestBrokerTransportEncryptionAndOIDC(t *testing.T) {
	c := newCluster(t)
	const ns, atLeast = "mv-eventing-tls", 400
	if _, err := c.try(30*time.Second, "kubectl", "get", "namespace", ns); err != nil {
		c.run(30*time.Second, "kubectl", "create", "namespace", ns)
	}
	t.Cleanup(func() {
		if _, err := c.try(4*time.Minute, "kubectl", "delete", "namespace", ns, "--wait=true", "--timeout=200s"); err != nil {
			t.Log(err)
		}
	})

	ca := testutil.NewTestCA(t)
	var secrets []string
	for name, svc := range map[string]string{
		"mt-broker-ingress-server-tls": "broker-ingress",
		"mt-broker-filter-server-tls":  "broker-filter",
		"imc-dispatcher-server-tls":    "imc-dispatcher",
	} {
		secrets = append(secrets, tlsSecret(ca, "knative-eventing", name, svc+".knative-eventing.svc.cluster.local", svc+".knative-eventing.svc"))
	}
	receiverHost := "tls-receiver." + ns + ".svc.cluster.local"
	secrets = append(secrets, tlsSecret(ca, ns, "tls-receiver", receiverHost, "tls-receiver."+ns+".svc"))
	secretFile := writeTemp(t, "eventing-tls-secrets.yaml", strings.Join(secrets, "---\n"))
	c.deleteAtEnd(secretFile)
	c.run(time.Minute, "kubectl", "apply", "-f", secretFile)
	c.eventingFeatures(map[string]string{"transport-encryption": "strict", "authentication-oidc": "enabled"})
	// Eventing's components keep the certificates and CAs they have seen
	// (as they would across a cert-manager renewal of the same CA); a new
	// CA, as each run makes, needs them started again.
	c.restartEventingDataPlane()

	indentedCA := strings.ReplaceAll(strings.TrimSpace(string(ca.PEM)), "\n", "\n      ")
	brokerFile := writeTemp(t, "broker.yaml", fmt.Sprintf(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: tls-broker
  namespace: %[1]s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: tls-receiver
  namespace: %[1]s
spec:
  replicas: 1
  selector:
    matchLabels: {app: tls-receiver}
  template:
    metadata:
      labels: {app: tls-receiver}
    spec:
      containers:
        - name: receiver
          image: ko://github.com/monovertex/monovertex/e2e/cluster/internal/tlsreceiver
          ports:
            - {containerPort: 8443}
            - {containerPort: 8080}
          volumeMounts:
            - {name: tls, mountPath: /tls, readOnly: true}
          readinessProbe:
            httpGet: {path: /count, port: 8080}
          securityContext:
            runAsNonRoot: true
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
            seccompProfile: {type: RuntimeDefault}
      volumes:
        - name: tls
          secret: {secretName: tls-receiver}
---
apiVersion: v1
kind: Service
metadata:
  name: tls-receiver
  namespace: %[1]s
spec:
  selector: {app: tls-receiver}
  ports:
    - {name: https, port: 443, targetPort: 8443}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata:
  name: tls-broker-to-receiver
  namespace: %[1]s
spec:
  broker: tls-broker
  subscriber:
    uri: https://%[2]s
    CACerts: |
      %[3]s
`, ns, receiverHost, indentedCA))
	t.Logf("ko apply -f broker.yaml (Broker, https receiver, Trigger):\n%s", c.run(15*time.Minute, "ko", "apply", "-f", brokerFile))
	for _, r := range []string{"broker/tls-broker", "trigger/tls-broker-to-receiver"} {
		if _, err := c.try(410*time.Second, "kubectl", "-n", ns, "wait", "--for=condition=Ready", "--timeout=400s", r); err != nil {
			c.dump(ns)
			t.Fatalf("%v; %s", err, c.run(30*time.Second, "kubectl", "-n", ns, "get", r, "-o", "jsonpath={.status.conditions}"))
		}
	}
	c.run(200*time.Second, "kubectl", "-n", ns, "rollout", "status", "deploy/tls-receiver", "--timeout=190s")
	brokerURL := c.run(30*time.Second, "kubectl", "-n", ns, "get", "broker", "tls-broker", "-o", "jsonpath={.status.address.url}")
	audience := c.run(30*time.Second, "kubectl", "-n", ns, "get", "broker", "tls-broker", "-o", "jsonpath={.status.address.audience}")
	t.Logf("Broker address %s, audience %q", brokerURL, audience)
	if !strings.HasPrefix(brokerURL, "https://") || audience == "" {
		t.Fatalf("Broker address %q audience %q: want https and an audience under strict and OIDC", brokerURL, audience)
	}

	bindingFile := writeTemp(t, "binding.yaml", fmt.Sprintf(`apiVersion: sources.knative.dev/v1
kind: SinkBinding
metadata:
  name: tls-runner-to-broker
  namespace: %s
spec:
  subject:
    apiVersion: serving.knative.dev/v1
    kind: Service
    name: tls-runner
  sink:
    ref:
      apiVersion: eventing.knative.dev/v1
      kind: Broker
      name: tls-broker
`, ns))
	runnerFile := writeTemp(t, "runner.yaml", fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: tls-runner-config
  namespace: %[1]s
data:
  paused: "false"
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: tls-runner
  namespace: %[1]s
  labels:
    networking.knative.dev/visibility: cluster-local
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: "1"
    spec:
      containers:
        - name: runner
          image: ko://github.com/monovertex/monovertex/cmd/runner
          ports:
            - name: http1
              containerPort: 8080
          env:
            - {name: MV_NAME, value: tls-runner}
            - {name: MV_SOURCE, value: generator}
            - {name: MV_GENERATOR_RPU, value: "20"}
            - {name: MV_GENERATOR_DURATION, value: 100ms}
            - {name: MV_SINK, value: cloudevents}
            - {name: MV_ADMIN_PORT, value: "2469"}
            - {name: MV_CONFIG_DIR, value: /etc/monovertex/config}
          volumeMounts:
            - {name: config, mountPath: /etc/monovertex/config, readOnly: true}
          readinessProbe:
            httpGet: {path: /healthz}
          securityContext:
            runAsNonRoot: true
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
            seccompProfile: {type: RuntimeDefault}
      volumes:
        - name: config
          configMap: {name: tls-runner-config}
`, ns))
	// The SinkBinding resolves its sink and makes the OIDC identity only
	// once its subject exists, then patches the Service: the revision that
	// carries K_SINK (https), K_CA_CERTS and the token volume at /oidc is
	// a later one. Earlier revisions exit (no K_SINK) or are refused (no
	// token) and send nothing; the one to count is the latest ready.
	t.Logf("ko apply -f runner.yaml (the Service, then its SinkBinding):\n%s\n%s",
		c.run(15*time.Minute, "ko", "apply", "-f", runnerFile), c.run(time.Minute, "kubectl", "apply", "-f", bindingFile))
	if _, err := c.try(410*time.Second, "kubectl", "-n", ns, "wait", "--for=condition=Ready", "--timeout=400s", "sinkbinding/tls-runner-to-broker"); err != nil {
		c.dump(ns)
		t.Fatalf("%v; %s", err, c.run(30*time.Second, "kubectl", "-n", ns, "get", "sinkbinding", "tls-runner-to-broker", "-o", "jsonpath={.status.conditions}"))
	}
	var rev, ksink, kca, mounts string
	testutil.WaitFor(t, 300*time.Second, "a ready revision with K_SINK, K_CA_CERTS and the /oidc token", func() bool {
		rev = c.run(30*time.Second, "kubectl", "-n", ns, "get", "ksvc", "tls-runner", "-o", "jsonpath={.status.latestReadyRevisionName}")
		if rev != "" && rev == c.run(30*time.Second, "kubectl", "-n", ns, "get", "ksvc", "tls-runner", "-o", "jsonpath={.status.latestCreatedRevisionName}") {
			tmpl := "jsonpath={.spec.containers[?(@.name==\"runner\")]"
			ksink = c.run(30*time.Second, "kubectl", "-n", ns, "get", "revision", rev, "-o", tmpl+`.env[?(@.name=="K_SINK")].value}`)
			kca = c.run(30*time.Second, "kubectl", "-n", ns, "get", "revision", rev, "-o", tmpl+`.env[?(@.name=="K_CA_CERTS")].value}`)
			mounts = c.run(30*time.Second, "kubectl", "-n", ns, "get", "revision", rev, "-o", tmpl+`.volumeMounts[*].mountPath}`)
			if strings.HasPrefix(ksink, "https://") && strings.Contains(kca, "BEGIN CERTIFICATE") && strings.Contains(mounts, "/oidc") {
				return true
			}
		}
		time.Sleep(2 * time.Second)
		return false
	})
	pod := c.pod(ns, "serving.knative.dev/revision="+rev, "runner", "queue-proxy")
	t.Logf("revision %s, pod %s: K_SINK %s, K_CA_CERTS %d bytes, mounts %s", rev, pod, ksink, len(kca), mounts)

	base := c.portForward(ns, pod, 2469)
	rpod := c.pod(ns, "app=tls-receiver", "receiver")
	rbase := c.portForward(ns, rpod, 8080)
	var got brokerReceiverCounts
	testutil.WaitFor(t, 240*time.Second, fmt.Sprintf("%d events at the https receiver", atLeast), func() bool {
		got = receiverCounts(t, rbase)
		if got.Unique < atLeast {
			time.Sleep(2 * time.Second)
			return false
		}
		return true
	})
	// Paused, the runner reads no more and finishes what it holds: then
	// every event it wrote (the Broker answered 2xx) must have reached the
	// receiver once, through the Trigger.
	t.Logf("paused after %v", c.setPaused(ns, "tls-runner-config", base, true))
	var st runner.Status
	testutil.WaitFor(t, 120*time.Second, "the receiver to have every event the runner wrote", func() bool {
		st, got = status(t, base), receiverCounts(t, rbase)
		if st.Totals.Acked != st.Totals.Read || int64(got.Unique) < st.Totals.Written {
			time.Sleep(2 * time.Second)
			return false
		}
		return true
	})
	time.Sleep(3 * time.Second)
	st, got = status(t, base), receiverCounts(t, rbase)
	t.Logf("runner: read %d, written %d, acked %d, sink errors %d, dropped %d; receiver: %d requests, %d unique events, %d with a bearer token, types %v",
		st.Totals.Read, st.Totals.Written, st.Totals.Acked, st.Totals.SinkErrors, st.Totals.SinkDropped, got.Requests, got.Unique, got.Bearer, got.Types)
	if int64(got.Unique) != st.Totals.Written || st.Totals.Acked != st.Totals.Written || st.Totals.SinkDropped != 0 {
		t.Fatalf("receiver has %d unique events; runner wrote %d and acked %d (dropped %d): want all equal", got.Unique, st.Totals.Written, st.Totals.Acked, st.Totals.SinkDropped)
	}

	t.Run("the Broker refuses requests without a valid token", func(t *testing.T) {
		c := c.with(t)
		host := strings.Split(strings.TrimPrefix(brokerURL, "https://"), "/")[0]
		dial := c.nodeDialer(map[string]string{host: c.clusterIP("knative-eventing", "broker-ingress")})
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.PEM)
		client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			DialContext:     dial,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}}
		post := func(url, auth string) int {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(`{"n":1}`))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range map[string]string{"Ce-Id": "forged-1", "Ce-Source": "/e2e", "Ce-Type": "e2e.forged", "Ce-Specversion": "1.0", "Content-Type": "application/json"} {
				req.Header.Set(k, v)
			}
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("POST %s: %v", url, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		noToken := post(brokerURL, "")
		forged := post(brokerURL, "Bearer eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJ4In0.c2lnbmF0dXJl")
		plain := post(strings.Replace(brokerURL, "https://", "http://", 1), "")
		t.Logf("POST to the Broker: no token %d, forged token %d, plain http %d", noToken, forged, plain)
		if noToken != http.StatusUnauthorized || forged != http.StatusUnauthorized {
			t.Errorf("no token %d, forged token %d; want 401 each", noToken, forged)
		}
		if plain/100 == 2 {
			t.Errorf("plain http accepted (%d) under transport-encryption strict", plain)
		}
		got = receiverCounts(t, rbase)
		if got.Types["e2e.forged"] != 0 {
			t.Errorf("%d refused events reached the receiver", got.Types["e2e.forged"])
		}
	})
}
