# shellcheck shell=bash
# Build steps of hack/cluster, sourced by up.sh after lib.sh. Each builds into
# $OPT/<component>-<version>/ and returns at once when that is already built.
# Binaries need only Go and the module proxy; images need the registry
# running (start_registry), since ko pushes to it.

tools_key() { echo "tools-$(cat "$HERE/tools/go.mod" "$HERE/tools/pause/main.go" | sha256sum | cut -c1-12)"; }
KEY_TOOLS=$(tools_key)
KEY_BASE=base-1-$KEY_TOOLS # bump the 1 when the base or pause image changes
KEY_COREDNS=coredns-$COREDNS_VERSION
KEY_SERVING=serving-$SERVING_VERSION
KEY_EVENTING=eventing-$EVENTING_VERSION
KEY_SERVING_HPA=serving-hpa-$SERVING_VERSION
KEY_PROMCRDS=promcrds-$PROMOP_VERSION

# Kubernetes v$KUBE_VERSION: control plane, kubelet, kube-proxy and kubectl
# from k8s.io/kubernetes through the wrapper module hack/cluster/k8s.
build_k8s() {
	local key=k8s-$KUBE_VERSION minor
	built "$key" || {
		minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
		mkdir -p "$OPT/$key/bin"
		(cd "$HERE/k8s" && go build -trimpath \
			-ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
			-o "$OPT/$key/bin/" \
			k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
			k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet \
			k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl)
		done_marker "$key"
	}
	link_bins "$key"
}

build_etcd() {
	local key=etcd-$ETCD_VERSION
	built "$key" || {
		mkdir -p "$OPT/$key/bin"
		(cd "$HERE/etcd" && go build -trimpath -ldflags="-s -w" -o "$OPT/$key/bin/etcd" .)
		done_marker "$key"
	}
	link_bins "$key"
}

# ko, crane and the sandbox program, at the versions hack/cluster/tools pins.
build_tools() {
	local key=$KEY_TOOLS
	built "$key" || {
		mkdir -p "$OPT/$key/bin" "$OPT/$key/pause"
		(cd "$HERE/tools" && go build -trimpath -ldflags="-s -w" -o "$OPT/$key/bin/" \
			github.com/google/ko github.com/google/go-containerregistry/cmd/crane &&
			go build -trimpath -ldflags="-s -w" -o "$OPT/$key/pause/pause" ./pause)
		done_marker "$key"
	}
	link_bins "$key"
}

build_kn() {
	local key=kn-$KN_VERSION
	built "$key" || {
		srccopy "knative.dev/client@$KN_VERSION" "$CACHE/src/$key"
		mkdir -p "$OPT/$key/bin"
		(cd "$CACHE/src/$key" && go build -trimpath -ldflags="-s -w" -o "$OPT/$key/bin/kn" ./cmd/kn)
		done_marker "$key"
	}
	link_bins "$key"
}

# Traefik runs as a node process (not a pod): its Knative provider is the
# cluster's KIngress implementation, there being no Envoy to pull.
build_traefik() {
	local key=traefik-$TRAEFIK_VERSION
	built "$key" || {
		srccopy "github.com/traefik/traefik/v3@$TRAEFIK_VERSION" "$CACHE/src/$key"
		mkdir -p "$OPT/$key/bin"
		(cd "$CACHE/src/$key" && go build -trimpath -ldflags="-s -w" -o "$OPT/$key/bin/traefik" ./cmd/traefik)
		done_marker "$key"
	}
	link_bins "$key"
}

# --- images ---------------------------------------------------------------
# crane's registry keeps manifests in memory only (blobs go to --disk): every
# image built is therefore also saved as an OCI layout under $OPT/KEY/oci and
# pushed back, byte for byte (same digests), when the registry starts.

# save_images KEY FILE...: save every image of our registry that FILEs
# reference into $OPT/KEY/oci, and list them in $OPT/KEY/images.
save_images() {
	local key=$1 ref repo n=0
	shift
	rm -rf "$OPT/$key/oci"
	mkdir -p "$OPT/$key/oci"
	: >"$OPT/$key/images"
	for ref in $(grep -ohE "$REG/[^\"' ]+(@sha256:[0-9a-f]{64}|:[A-Za-z0-9._-]+)" "$@" | sort -u); do
		n=$((n + 1))
		repo=${ref#"$REG"/}
		repo=${repo%@*}
		repo=${repo%:*}
		crane pull --insecure --format=oci "$ref" "$OPT/$key/oci/$n"
		echo "$n $repo $ref" >>"$OPT/$key/images"
	done
	log "saved $n images of $key"
}

# push_images KEY: push $OPT/KEY's saved images back into the registry.
push_images() {
	local key=$1 n repo ref tag
	[ -f "$OPT/$key/images" ] || return 0
	while read -r n repo ref; do
		# a tag keeps the manifest from being garbage; refs by digest still resolve
		tag=${ref##*:}
		case $ref in *@sha256:*) tag=$key ;; esac
		crane push --insecure "$OPT/$key/oci/$n" "$REG/$repo:$tag" >/dev/null
	done <"$OPT/$key/images"
}

# The base image (like distroless static:nonroot: /etc/passwd and group with
# nonroot 65532, /tmp, CA certificates) and the pause image, made here since
# nothing can be pulled from outside. Knative's and the examples' pods set
# runAsNonRoot, so the base must name a non-root user.
BASE_IMAGE=$REG/cluster/static:nonroot
PAUSE_IMAGE=$REG/cluster/pause:1
build_base_images() {
	local key=$KEY_BASE d
	built "$key" || {
		d=$OPT/$key/work
		rm -rf "$d"
		mkdir -p "$d/static/etc/ssl/certs" "$d/static/tmp" "$d/static/home/nonroot" "$d/pause"
		chmod 1777 "$d/static/tmp"
		printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$d/static/etc/passwd"
		printf 'root:x:0:\nnonroot:x:65532:\n' >"$d/static/etc/group"
		[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$d/static/etc/ssl/certs/"
		chown -R 65532:65532 "$d/static/home/nonroot"
		tar -C "$d/static" --numeric-owner --mtime=@0 --sort=name -cf "$d/static.tar" .
		crane append --insecure -f "$d/static.tar" -t "$BASE_IMAGE"
		crane mutate --insecure "$BASE_IMAGE" --user 65532:65532 --set-platform linux/amd64 -t "$BASE_IMAGE"
		cp "$OPT/$KEY_TOOLS/pause/pause" "$d/pause/pause"
		tar -C "$d/pause" --numeric-owner --mtime=@0 -cf "$d/pause.tar" pause
		crane append --insecure -f "$d/pause.tar" -t "$PAUSE_IMAGE"
		crane mutate --insecure "$PAUSE_IMAGE" --entrypoint=/pause --set-platform linux/amd64 -t "$PAUSE_IMAGE"
		printf '%s\n%s\n' "$BASE_IMAGE" "$PAUSE_IMAGE" >"$d/refs"
		save_images "$key" "$d/refs"
		done_marker "$key"
	}
}

# ko_env: ko building cluster components into our registry, on our base.
ko_env() { env KO_DOCKER_REPO="$1" KO_DEFAULTBASEIMAGE="$BASE_IMAGE" GOFLAGS=-mod=mod "${@:2}"; }

# CoreDNS from its own module source (its go.mod's replaces must apply).
build_coredns() {
	local key=$KEY_COREDNS
	built "$key" || {
		srccopy "github.com/coredns/coredns@$COREDNS_VERSION" "$CACHE/src/$key"
		(cd "$CACHE/src/$key" && ko_env "$REG/cluster" ko build --base-import-paths \
			--platform=linux/amd64 . >"$OPT/$key.ref.tmp")
		mkdir -p "$OPT/$key"
		mv "$OPT/$key.ref.tmp" "$OPT/$key/ref"
		save_images "$key" "$OPT/$key/ref"
		done_marker "$key"
	}
}

# Knative Serving, core only, resolved with ko from the module source.
build_serving() {
	local key=$KEY_SERVING src net caching
	built "$key" || {
		src=$CACHE/src/$key
		srccopy "knative.dev/serving@$SERVING_VERSION" "$src"
		# (go list names a module's Dir only once it is downloaded: on a
		# machine with an empty module cache it printed nothing.)
		(cd "$src" && go mod download knative.dev/networking knative.dev/caching)
		net=$(cd "$src" && go list -m -f '{{.Dir}}' knative.dev/networking)
		caching=$(cd "$src" && go list -m -f '{{.Dir}}' knative.dev/caching)
		[ -n "$net" ] && [ -n "$caching" ] || die "no module directory for knative.dev/networking or caching"
		# These are symlinks in Serving's git tree (into knative.dev/networking
		# and caching), which the module zip leaves out: copy them from the
		# modules Serving requires.
		cp "$net"/config/{certificate,ingress,serverlessservice,domain-claim}.yaml "$src/config/core/300-resources/"
		cp "$caching/config/image.yaml" "$src/config/core/300-resources/"
		cp "$net/config/config-network.yaml" "$src/config/core/configmaps/network.yaml"
		chmod u+w "$src"/config/core/300-resources/* "$src/config/core/configmaps/network.yaml"
		# Its .ko.yaml names a base from ghcr.io, unreachable here: ours.
		printf 'defaultBaseImage: %s\n' "$BASE_IMAGE" >"$src/.ko.yaml"
		mkdir -p "$OPT/$key"
		(cd "$src" && ko_env "$REG/knative-serving" ko resolve --base-import-paths \
			--platform=linux/amd64 -R -f config/core/ >"$OPT/$key/serving-core.yaml.tmp")
		mv "$OPT/$key/serving-core.yaml.tmp" "$OPT/$key/serving-core.yaml"
		save_images "$key" "$OPT/$key/serving-core.yaml"
		done_marker "$key"
	}
}

# Knative Serving's HPA autoscaler (config/hpa-autoscaling/, the release's
# serving-hpa.yaml): deploy/pull-runner/ scales with the HPA class.
build_serving_hpa() {
	local key=$KEY_SERVING_HPA src
	built "$key" || {
		src=$CACHE/src/$KEY_SERVING
		srccopy "knative.dev/serving@$SERVING_VERSION" "$src"
		printf 'defaultBaseImage: %s\n' "$BASE_IMAGE" >"$src/.ko.yaml"
		mkdir -p "$OPT/$key"
		(cd "$src" && ko_env "$REG/knative-serving" ko resolve --base-import-paths \
			--platform=linux/amd64 -f config/hpa-autoscaling/controller.yaml >"$OPT/$key/serving-hpa.yaml.tmp")
		mv "$OPT/$key/serving-hpa.yaml.tmp" "$OPT/$key/serving-hpa.yaml"
		save_images "$key" "$OPT/$key/serving-hpa.yaml"
		done_marker "$key"
	}
}

# Knative Eventing: core, the in-memory channel and the multi-tenant
# channel-based Broker, resolved with ko from the module source.
build_eventing() {
	local key=$KEY_EVENTING src part
	built "$key" || {
		src=$CACHE/src/$key
		srccopy "knative.dev/eventing@$EVENTING_VERSION" "$src"
		# Two config maps of config/core are symlinks in the git tree, left
		# out of the module zip; their targets are in the zip's third_party.
		cp "$src"/third_party/eventing-integrations-latest/eventing-{integrations,transformations}-images.yaml \
			"$src/config/core/configmaps/"
		chmod u+w "$src"/config/core/configmaps/*
		# Its .ko.yaml names a base from gcr.io, unreachable here: ours.
		printf 'defaultBaseImage: %s\n' "$BASE_IMAGE" >"$src/.ko.yaml"
		mkdir -p "$OPT/$key"
		for part in core channels/in-memory-channel brokers/mt-channel-broker; do
			# -R reads only *.yaml/*.yml/*.json: the "*.yaml~<commit> (...)"
			# leftovers in mt-channel-broker/ are skipped.
			(cd "$src" && ko_env "$REG/knative-eventing" ko resolve --base-import-paths \
				--platform=linux/amd64 -R -f "config/$part/" >"$OPT/$key/${part//\//-}.yaml.tmp")
			mv "$OPT/$key/${part//\//-}.yaml.tmp" "$OPT/$key/${part//\//-}.yaml"
		done
		# event_display, the subscriber of deploy/containersource/: its
		# gcr.io image cannot be pulled here, so the cluster offers its own
		# (MONOVERTEX_CLUSTER_EVENT_DISPLAY in the env file).
		(cd "$src" && ko_env "$REG/knative-eventing" ko build --base-import-paths \
			--platform=linux/amd64 ./cmd/event_display >"$OPT/$key/event-display.ref.tmp")
		mv "$OPT/$key/event-display.ref.tmp" "$OPT/$key/event-display.ref"
		save_images "$key" "$OPT/$key"/*.yaml "$OPT/$key/event-display.ref"
		done_marker "$key"
	}
}

# The Prometheus Operator's PodMonitor and ServiceMonitor CRDs (no
# operator): every deploy/ example ships a PodMonitor, so `ko apply -f
# deploy/<example>/` needs the kind to exist.
build_promcrds() {
	local key=$KEY_PROMCRDS dir
	built "$key" || {
		go mod download "github.com/prometheus-operator/prometheus-operator@$PROMOP_VERSION"
		dir=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMOP_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
		mkdir -p "$OPT/$key"
		cp "$dir"/example/prometheus-operator-crd/monitoring.coreos.com_{podmonitors,servicemonitors}.yaml "$OPT/$key/"
		done_marker "$key"
	}
}

# --- the node's network namespace -------------------------------------------
netns_up() {
	ip netns list | grep -qw "$NS" || ip netns add "$NS"
	ip -n "$NS" link set lo up
	# The kernel here has no dummy netdev: the node IP sits on a bridge with
	# no ports, and the default route points into it, so whatever is not for
	# the node, a pod or a service goes nowhere.
	ip -n "$NS" link show node0 >/dev/null 2>&1 || ip -n "$NS" link add node0 type bridge
	ip -n "$NS" addr replace "$NODE_IP/24" dev node0
	ip -n "$NS" link set node0 up
	ip -n "$NS" route replace default dev node0
	nsx sysctl -q -w net.ipv4.ip_forward=1
	nsx sysctl -q -w net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 2>/dev/null || true
	nsx sysctl -q -w net.ipv4.conf.all.route_localnet=1
	# The guard: drop anything leaving towards the (absent) outside; only the
	# node, pod and service ranges and loopback pass. filter/OUTPUT sees the
	# pre-DNAT device, so the ranges are allowed before the drop.
	nsx iptables -N MV-GUARD 2>/dev/null || nsx iptables -F MV-GUARD
	local cidr
	for cidr in 10.250.0.0/24 "$CLUSTER_CIDR" "$SVC_CIDR" 127.0.0.0/8; do
		nsx iptables -A MV-GUARD -d "$cidr" -j RETURN
	done
	nsx iptables -A MV-GUARD -o node0 -j DROP
	nsx iptables -C OUTPUT -j MV-GUARD 2>/dev/null || nsx iptables -I OUTPUT -j MV-GUARD
	nsx iptables -C FORWARD -j MV-GUARD 2>/dev/null || nsx iptables -I FORWARD -j MV-GUARD
}

# --- registry and cluster images --------------------------------------------
start_registry() {
	mkdir -p "$STATE/registry" # crane does not make its --disk folder
	start registry "$BIN/crane" registry serve --address "0.0.0.0:$REG_PORT" --disk "$STATE/registry"
	start_forward fwd-registry "$REG_PORT" "127.0.0.1:$REG_PORT"
	waitfor 30 curl -sf "http://$REG/v2/" || die "registry did not start, see $RUNDIR/registry.log"
}

# images KEY NAME BUILD: build KEY's images if missing, else push the saved
# ones into this registry process (once per registry pid).
images() {
	local key=$1 name=$2 fn=$3 mark
	mark=$RUNDIR/pushed-$key
	if ! built "$key"; then
		timed "$name" "$fn"
	elif [ "$(cat "$mark" 2>/dev/null)" != "$(cat "$RUNDIR/registry.pid")" ]; then
		push_images "$key"
	fi
	cat "$RUNDIR/registry.pid" >"$mark"
}
