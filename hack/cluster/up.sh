#!/usr/bin/env bash
# Start a single-node Kubernetes with Knative Serving and Eventing on this
# machine, building whatever is missing first:
#
#   bash hack/cluster/up.sh        # prints the env file's path as its last line
#   . /var/cache/monovertex-cluster/state/env
#   ko apply -f deploy/function/ && kubectl get ksvc
#   bash hack/cluster/down.sh
#
# Builds (cold: tens of minutes on 2 cores; cached under
# ${MONOVERTEX_CLUSTER_DIR:-/var/cache/monovertex-cluster} by version) use
# only the Go module proxy and Debian packages. Then, all inside the network
# namespace "monovertex-node": a registry, containerd, etcd, the control
# plane, kubelet, kube-proxy, CoreDNS, Knative Serving with Traefik as its
# ingress, Knative Eventing (in-memory channel, multi-tenant Broker), and the
# Prometheus Operator's PodMonitor CRD. Running it again reuses what runs.
#
# Host side (127.0.0.1 only): the API server on :6443, the registry on :5000
# (KO_DOCKER_REPO), Traefik's public entrypoint on :8081.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
. "$HERE/build.sh"
T0=$(date +%s)
mkdir -p "$RUNDIR" "$PKI"

bash "$HERE/deps.sh"

# --- builds (each returns at once when cached) -----------------------------
# ko and crane first: the images need them and the registry, not Kubernetes.
timed tools build_tools
netns_up
start_registry
images "$KEY_BASE" base-images build_base_images
images "$KEY_COREDNS" coredns build_coredns
images "$KEY_SERVING" knative-serving build_serving
images "$KEY_SERVING_HPA" knative-serving-hpa build_serving_hpa
images "$KEY_EVENTING" knative-eventing build_eventing
built "$KEY_PROMCRDS" || timed promcrds build_promcrds
timed kubernetes build_k8s
timed etcd build_etcd
timed kn build_kn
timed traefik build_traefik

# --- PKI: a CA, serving and client certs, kubeconfigs ------------------------
pki() {
	cd "$PKI"
	[ -f ca.key ] || {
		openssl genrsa -out ca.key 2048 2>/dev/null
		openssl req -x509 -new -nodes -key ca.key -subj "/CN=monovertex-cluster-ca" -days 3650 -out ca.crt
	}
	[ -f sa.key ] || { openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null; }
	cert() { # name CN O [SANs]
		local n=$1 cn=$2 o=$3 san=${4:-} subj
		[ -f "$n.crt" ] && return 0
		openssl genrsa -out "$n.key" 2048 2>/dev/null
		subj="/CN=$cn"
		[ -n "$o" ] && subj="/O=$o/CN=$cn"
		openssl req -new -key "$n.key" -subj "$subj" -out "$n.csr"
		{
			echo "basicConstraints=CA:FALSE"
			echo "keyUsage=critical,digitalSignature,keyEncipherment"
			if [ -n "$san" ]; then
				echo "extendedKeyUsage=serverAuth,clientAuth"
				echo "subjectAltName=$san"
			else echo "extendedKeyUsage=clientAuth"; fi
		} >"$n.ext"
		openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$n.ext" -out "$n.crt" 2>/dev/null
		rm -f "$n.csr" "$n.ext"
	}
	cert apiserver kube-apiserver "" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$KUBE_SVC_IP"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert admin kubernetes-admin system:masters
	cert controller-manager system:kube-controller-manager ""
	cert scheduler system:kube-scheduler ""
	cert kube-proxy system:kube-proxy ""
	cert kubelet "system:node:$NODE_NAME" system:nodes "DNS:$NODE_NAME,IP:$NODE_IP,IP:127.0.0.1"
	cert front-proxy-client front-proxy-client ""
	# 127.0.0.1:6443 is the API server inside the node and, through the
	# forward, on the host: one kubeconfig serves both.
	kc() { # name user
		local f=$PKI/$1.kubeconfig
		[ -f "$f" ] && return 0
		kubectl config set-cluster monovertex --server="https://127.0.0.1:$API_PORT" --certificate-authority=ca.crt --embed-certs --kubeconfig="$f.tmp" >/dev/null
		kubectl config set-credentials "$2" --client-certificate="$1.crt" --client-key="$1.key" --embed-certs --kubeconfig="$f.tmp" >/dev/null
		kubectl config set-context monovertex --cluster=monovertex --user="$2" --kubeconfig="$f.tmp" >/dev/null
		kubectl config use-context monovertex --kubeconfig="$f.tmp" >/dev/null
		mv "$f.tmp" "$f"
	}
	kc admin admin
	kc controller-manager controller-manager
	kc scheduler scheduler
	kc kube-proxy kube-proxy
	kc kubelet kubelet
	cd - >/dev/null
}
pki

# --- containerd -----------------------------------------------------------------
containerd_up() {
	local c=$STATE/containerd
	mkdir -p "$c" "$STATE/cni/net.d"
	write_if_changed "$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
[grpc]
  address = "$c/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj (-998 for a
  # sandbox) is refused and runc init dies with "can't get final child's PID
  # from pipe: EOF". Clamp pods' scores to containerd's own.
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    # the registry speaks plain HTTP
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REG"]
      endpoint = ["http://$REG"]
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$NODE_IP:$REG_PORT"]
      endpoint = ["http://$REG"]
EOF
	write_if_changed "$STATE/cni/net.d/10-monovertex.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "monovertex",
  "plugins": [
    { "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "dataDir": "$STATE/cni/ipam",
                "ranges": [[{ "subnet": "$POD_CIDR" }]], "routes": [{ "dst": "0.0.0.0/0" }] } },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
	start containerd /usr/bin/containerd --config "$c/config.toml"
	waitfor 30 test -S "$c/containerd.sock" || die "containerd did not start, see $RUNDIR/containerd.log"
}
containerd_up

# --- control plane ---------------------------------------------------------------
control_plane() {
	start etcd "$BIN/etcd" --name node --data-dir "$STATE/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster node=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
		--unsafe-no-fsync # a throwaway test cluster: no fsync keeps it fast on a shared disk
	waitfor 60 nsx curl -sf http://127.0.0.1:2381/health || die "etcd did not start, see $RUNDIR/etcd.log"
	# --kubelet-preferred-address-types=InternalIP: otherwise it looks the
	# node name up through the host's resolver.
	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
		--bind-address=0.0.0.0 --secure-port="$API_PORT" --advertise-address="$NODE_IP" \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range="$SVC_CIDR" --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--allow-privileged=true --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$PKI/apiserver-kubelet-client.key" --kubelet-certificate-authority="$PKI/ca.crt" \
		--proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
		--requestheader-client-ca-file="$PKI/ca.crt" --requestheader-allowed-names=front-proxy-client \
		--requestheader-extra-headers-prefix=X-Remote-Extra- --requestheader-group-headers=X-Remote-Group \
		--requestheader-username-headers=X-Remote-User --enable-aggregator-routing=true \
		--kubelet-preferred-address-types=InternalIP
	start_forward fwd-apiserver "$API_PORT" "127.0.0.1:$API_PORT"
	waitfor 180 kubectl get --raw /readyz || die "kube-apiserver not ready, see $RUNDIR/kube-apiserver.log"
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$PKI/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$PKI/controller-manager.kubeconfig" --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
		--root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" --use-service-account-credentials=true \
		--controllers='*,bootstrapsigner,tokencleaner' --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" \
		--node-cidr-mask-size=24 --service-cluster-ip-range="$SVC_CIDR" --leader-elect=false
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$PKI/scheduler.kubeconfig" \
		--authentication-kubeconfig="$PKI/scheduler.kubeconfig" --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false
	waitfor 60 nsx curl -skf https://127.0.0.1:10257/healthz || die "kube-controller-manager not healthy"
	waitfor 60 nsx curl -skf https://127.0.0.1:10259/healthz || die "kube-scheduler not healthy"
}
control_plane

# --- kubelet and kube-proxy -------------------------------------------------------
kubelet_up() {
	local k=$STATE/kubelet mcg cgroot h d top p part c
	mkdir -p "$k/root" "$k/pod-logs"
	# Pods' cgroups go below the memory cgroup we run in, made in every v1
	# hierarchy; down.sh removes what is listed in cgroup-made.
	mcg=$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
	cgroot=${mcg%/}/monovertex-cluster
	echo "$cgroot" >"$STATE/cgroot"
	for h in /sys/fs/cgroup/*/; do
		case $h in */unified/) continue ;; esac
		d=$h$cgroot
		top=""
		while [ ! -d "$d" ]; do top=$d; d=$(dirname "$d"); done
		[ -n "$top" ] && echo "$top" >>"$STATE/cgroup-made"
		mkdir -p "$h$cgroot"
	done
	# cpuset children start empty in cgroup v1: copy cpus and mems down.
	p=/sys/fs/cgroup/cpuset
	for part in $(echo "$cgroot" | tr / ' '); do
		c=$p/$part
		[ -s "$c/cpuset.cpus" ] || cat "$p/cpuset.cpus" >"$c/cpuset.cpus"
		[ -s "$c/cpuset.mems" ] || cat "$p/cpuset.mems" >"$c/cpuset.mems"
		p=$c
	done
	# Pods with dnsPolicy Default get this: the cluster's DNS, never the host's.
	echo "nameserver $DNS_IP" >"$k/resolv.conf"
	# failCgroupV1: false - this host has cgroup v1, which v1.35+ refuses by
	# default. oomScoreAdj 0: see restrict_oom_score_adj in containerd.
	write_if_changed "$k/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: $cgroot
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
containerRuntimeEndpoint: unix://$STATE/containerd/containerd.sock
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
resolvConf: $k/resolv.conf
podLogsDir: $k/pod-logs
readOnlyPort: 0
oomScoreAdj: 0
serializeImagePulls: false
rotateCertificates: false
imageGCHighThresholdPercent: 95
# kubectl logs shows only a container's current log file: at the default
# 10Mi the log sink's lines of a test under load (about 60,000 per pod)
# were rotated away before the test counted them.
containerLogMaxSize: 200Mi
containerLogMaxFiles: 3
evictionHard: {memory.available: "200Mi", nodefs.available: "2%", imagefs.available: "2%"}
EOF
	start kubelet "$BIN/kubelet" --config="$k/config.yaml" --kubeconfig="$PKI/kubelet.kubeconfig" \
		--hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --root-dir="$k/root" --cert-dir="$k/pki"
	mkdir -p "$STATE/kube-proxy"
	write_if_changed "$STATE/kube-proxy/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $PKI/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $NODE_NAME
oomScoreAdj: 0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# 0: leave the (host-wide, read-only here) conntrack sysctls alone
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
	start kube-proxy "$BIN/kube-proxy" --config="$STATE/kube-proxy/config.yaml"
	waitfor 180 kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s || die "node not Ready, see $RUNDIR/kubelet.log"
	waitfor 60 nsx curl -sf http://127.0.0.1:10256/healthz || die "kube-proxy not healthy, see $RUNDIR/kube-proxy.log"
}
kubelet_up

# --- CoreDNS (no forward plugin: names outside the cluster do not resolve) ---------
coredns_up() {
	local img
	img=$(cat "$OPT/$KEY_COREDNS/ref")
	kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: system:coredns}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: system:coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      # Our base image runs as nonroot (65532), which may not bind :53;
      # this sysctl is namespaced and "safe", so no root is needed.
      securityContext:
        sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: "0"}]
      containers:
      - name: coredns
        image: $img
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {containerPort: 53, name: dns, protocol: UDP}
        - {containerPort: 53, name: dns-tcp, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        volumeMounts: [{name: config, mountPath: /etc/coredns}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
EOF
	kubectl -n kube-system rollout status deploy/coredns --timeout=300s >/dev/null
}
log "CoreDNS"
coredns_up

# apply_knative FILE...: CRDs first, then the rest, repeated while the kinds
# of new CRDs are not served yet and the webhook that validates the config
# maps does not answer.
apply_knative() {
	local f i
	for f in "$@"; do
		# (kubectl fails on a selector that matches nothing)
		grep -q "knative.dev/crd-install" "$f" || continue
		# kubectl still maps every kind of the file, and fails on those whose
		# CRD is only now being made (Certificate, Image): the CRDs are
		# applied all the same, and the full apply below retries the rest.
		kubectl apply --server-side --force-conflicts -f "$f" --selector knative.dev/crd-install=true >/dev/null 2>&1 || true
	done
	kubectl wait --for=condition=Established crd --all --timeout=120s >/dev/null
	for f in "$@"; do
		for i in $(seq 40); do
			kubectl apply --server-side --force-conflicts -f "$f" >/dev/null 2>"$RUNDIR/apply.err" && break
			[ "$i" = 40 ] && { cat "$RUNDIR/apply.err" >&2; die "kubectl apply -f $f kept failing"; }
			sleep 5
		done
	done
}

# --- Knative Serving + Traefik ------------------------------------------------------
log "Knative Serving"
apply_knative "$OPT/$KEY_SERVING/serving-core.yaml" "$OPT/$KEY_SERVING_HPA/serving-hpa.yaml"
kubectl -n knative-serving rollout status deploy/webhook --timeout=300s >/dev/null
# Our registry serves plain HTTP and only local refs: never resolve tags there.
waitfor 120 kubectl -n knative-serving patch configmap config-deployment --type merge -p \
	"{\"data\":{\"registries-skipping-tag-resolving\":\"kind.local,ko.local,dev.local,$REG,$NODE_IP:$REG_PORT\"}}"
waitfor 60 kubectl -n knative-serving patch configmap config-domain --type merge -p '{"data":{"example.com":""}}'

traefik_up() {
	# Services that stand for the node process: public and cluster-local.
	kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: traefik}
---
apiVersion: v1
kind: Service
metadata: {name: traefik-public, namespace: traefik}
spec: {ports: [{name: http, port: 80, targetPort: $INGRESS_PORT}]}
---
apiVersion: v1
kind: Service
metadata: {name: traefik-private, namespace: traefik}
spec: {ports: [{name: http, port: 80, targetPort: $LOCAL_INGRESS_PORT}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: traefik-public-node, namespace: traefik, labels: {kubernetes.io/service-name: traefik-public}}
addressType: IPv4
ports: [{name: http, port: $INGRESS_PORT, protocol: TCP}]
endpoints: [{addresses: ["$NODE_IP"], conditions: {ready: true}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: traefik-private-node, namespace: traefik, labels: {kubernetes.io/service-name: traefik-private}}
addressType: IPv4
ports: [{name: http, port: $LOCAL_INGRESS_PORT, protocol: TCP}]
endpoints: [{addresses: ["$NODE_IP"], conditions: {ready: true}}]
EOF
	# throttleDuration: the provider marks a Knative Ingress ready that long
	# after it hands the route over, and the route goes live up to
	# providersThrottleDuration (2 s) later; at 0 (the default) a ksvc is
	# Ready while the ingress still answers 404 for its host.
	start traefik env KUBECONFIG="$PKI/admin.kubeconfig" "$BIN/traefik" \
		--log.level=INFO --accesslog=true --ping=true --ping.entryPoint=ping \
		--entryPoints.web.address=":$INGRESS_PORT" --entryPoints.local.address=":$LOCAL_INGRESS_PORT" \
		--entryPoints.ping.address=127.0.0.1:8089 \
		--experimental.knative=true --providers.knative=true \
		--providers.knative.publicEntrypoints=web --providers.knative.privateEntrypoints=local \
		--providers.knative.publicService.name=traefik-public --providers.knative.publicService.namespace=traefik \
		--providers.knative.privateService.name=traefik-private --providers.knative.privateService.namespace=traefik \
		--providers.knative.throttleDuration=3s \
		--global.checkNewVersion=false --global.sendAnonymousUsage=false
	waitfor 60 nsx curl -sf http://127.0.0.1:8089/ping || die "traefik did not start, see $RUNDIR/traefik.log"
	start_forward fwd-ingress "$INGRESS_PORT" "$NODE_IP:$INGRESS_PORT"
	kubectl -n knative-serving patch configmap config-network --type merge \
		-p '{"data":{"ingress-class":"traefik.ingress.networking.knative.dev"}}' >/dev/null
}
traefik_up
for d in controller webhook activator autoscaler autoscaler-hpa; do
	kubectl -n knative-serving rollout status "deploy/$d" --timeout=300s >/dev/null
done

# --- Knative Eventing ----------------------------------------------------------------
log "Knative Eventing"
apply_knative "$OPT/$KEY_EVENTING/core.yaml" "$OPT/$KEY_EVENTING/channels-in-memory-channel.yaml" \
	"$OPT/$KEY_EVENTING/brokers-mt-channel-broker.yaml"
for d in eventing-controller eventing-webhook imc-controller imc-dispatcher mt-broker-controller mt-broker-filter mt-broker-ingress; do
	kubectl -n knative-eventing rollout status "deploy/$d" --timeout=300s >/dev/null
done

kubectl apply --server-side --force-conflicts -f "$OPT/$KEY_PROMCRDS/" >/dev/null

# --- the env file ---------------------------------------------------------------------
write_if_changed "$STATE/env" <<EOF
# The monovertex cluster (hack/cluster/up.sh). Source it: . $STATE/env
export KUBECONFIG=$PKI/admin.kubeconfig
export KO_DOCKER_REPO=$REG/monovertex
export KO_DEFAULTBASEIMAGE=$BASE_IMAGE
export PATH=$BIN:\$PATH
# Knative's public ingress (Traefik), for curl -H "Host: <ksvc>.<ns>.example.com"
export MONOVERTEX_CLUSTER_INGRESS=http://127.0.0.1:$INGRESS_PORT
# Run CMD in the node's network namespace (pod and service IPs): \$MONOVERTEX_CLUSTER_NSENTER CMD
export MONOVERTEX_CLUSTER_NSENTER="nsenter --net=/run/netns/$NS --"
export MONOVERTEX_CLUSTER_ENV=$STATE/env
# Knative Eventing's event_display, built here (for deploy/containersource/)
export MONOVERTEX_CLUSTER_EVENT_DISPLAY=$(cat "$OPT/$KEY_EVENTING/event-display.ref")
export GOPROXY=$GOPROXY
EOF
log "cluster up in $(($(date +%s) - T0))s"
echo "$STATE/env"
