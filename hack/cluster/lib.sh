# shellcheck shell=bash
# Shared settings and helpers of hack/cluster (sourced by up.sh and down.sh).
#
# The cluster is one node: every process of it (etcd, the control plane,
# containerd, kubelet, kube-proxy, Traefik, the registry) runs on this
# machine inside one network namespace, $NS, whose only devices are lo and a
# port-less bridge carrying the node IP. Nothing in it can reach outside the
# machine. The host reaches the API server, the registry and the ingress
# through socat forwards on 127.0.0.1 (see start_forward).
#
# Everything built (binaries, images, resolved Knative YAML) is cached under
# $CACHE, outside the work tree, keyed by version: a fresh clone reuses it
# and a version bump here rebuilds only what changed. The running cluster's
# state (PKI, etcd data, pid files, logs, the env file) is under $STATE.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

# --- versions (a change here rebuilds that component) ---------------------
KUBE_VERSION=v1.37.2          # hack/cluster/k8s/go.mod pins the same
ETCD_VERSION=v3.6.16          # hack/cluster/etcd/go.mod pins the same
COREDNS_VERSION=v1.15.0
SERVING_VERSION=v0.50.0
EVENTING_VERSION=v0.50.0
TRAEFIK_VERSION=v3.6.12       # v3.7.x needs a nested module the proxy does not serve
# knative.dev/client v0.50.0 needs knative.dev/client/pkg, which the proxy
# does not serve; v0.40.0 still had pkg/ inside the module.
KN_VERSION=v0.40.0
PROMOP_VERSION=v0.85.0        # only its PodMonitor/ServiceMonitor CRDs

# --- places ---------------------------------------------------------------
CACHE=${MONOVERTEX_CLUSTER_DIR:-/var/cache/monovertex-cluster}
STATE=$CACHE/state            # run state of the cluster: removed by down.sh
OPT=$CACHE/opt                # one folder per built component and version
BIN=$CACHE/bin                # symlinks into $OPT: what PATH gets
PKI=$STATE/pki
RUNDIR=$STATE/run             # pid files and logs
LOGS=$CACHE/logs              # build logs (kept across down.sh)

# --- network --------------------------------------------------------------
NS=monovertex-node            # network namespace holding the whole node
NODE_NAME=monovertex-node
NODE_IP=10.250.0.10           # on the port-less bridge node0 inside $NS
POD_CIDR=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SVC_CIDR=10.96.0.0/16
KUBE_SVC_IP=10.96.0.1
DNS_IP=10.96.0.10
REG_PORT=5000                 # the registry: same port inside $NS and on the host's 127.0.0.1
REG=127.0.0.1:$REG_PORT       # so an image ref ko writes from the host is the one the kubelet pulls
API_PORT=6443                 # same on both sides too, so one kubeconfig serves both
INGRESS_PORT=8081             # Traefik's public entrypoint (host 127.0.0.1 and node)
LOCAL_INGRESS_PORT=8082       # Traefik's cluster-local entrypoint (node only)

# Never fetch from origin hosts: only the module proxy (no ",direct").
export GOPROXY=https://proxy.golang.org
export GOFLAGS=-mod=mod
export CGO_ENABLED=0
export KUBECONFIG=$PKI/admin.kubeconfig
export PATH=$BIN:$PATH

mkdir -p "$OPT" "$BIN" "$LOGS"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# nsx CMD...: run CMD in the node's network namespace (host mounts and PIDs).
nsx() { nsenter --net="/run/netns/$NS" -- "$@"; }

# running NAME: whether the process recorded as NAME is alive.
running() { [ -f "$RUNDIR/$1.pid" ] && kill -0 "$(cat "$RUNDIR/$1.pid")" 2>/dev/null; }

# start NAME CMD...: run CMD detached inside $NS, its pid in $RUNDIR/NAME.pid
# and its output in $RUNDIR/NAME.log; nothing if NAME already runs. setsid
# takes it out of our process group, so up.sh can exit and it stays.
# write_if_changed FILE: write stdin to FILE only when it differs, so that
# a second up.sh does not touch the config of a process that runs: kube-proxy
# watches its file and exits when it changes.
write_if_changed() {
	local tmp
	tmp=$(mktemp "$1.XXXXXX")
	cat >"$tmp"
	if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

start() {
	local name=$1
	shift
	if running "$name"; then
		log "$name already running (pid $(cat "$RUNDIR/$name.pid"))"
		return 0
	fi
	# nsenter without --fork execs CMD, so the recorded pid is CMD's own.
	setsid bash -c 'echo $$ > "$0"; exec nsenter --net=/run/netns/'"$NS"' -- "$@"' \
		"$RUNDIR/$name.pid" "$@" >"$RUNDIR/$name.log" 2>&1 </dev/null &
	local i
	for i in $(seq 50); do [ -s "$RUNDIR/$name.pid" ] && break; sleep 0.1; done
	log "started $name (pid $(cat "$RUNDIR/$name.pid"))"
}

# start_forward NAME HOSTPORT NSADDR: listen on the host's 127.0.0.1:HOSTPORT
# and relay each connection to NSADDR inside $NS. A socat per connection
# enters the namespace; the node gets no device towards the host, so the
# guard below stays simple and nothing in the node can open a connection out.
start_forward() {
	local name=$1 port=$2 target=$3
	if running "$name"; then return 0; fi
	# socat splits an address at every unescaped ':', EXEC's command included.
	setsid bash -c 'echo $$ > "$0"; exec socat TCP-LISTEN:'"$port"',bind=127.0.0.1,reuseaddr,fork \
		EXEC:"nsenter --net=/run/netns/'"$NS"' -- socat STDIO TCP\:'"${target//:/\\:}"'"' \
		"$RUNDIR/$name.pid" >"$RUNDIR/$name.log" 2>&1 </dev/null &
	local i
	for i in $(seq 50); do [ -s "$RUNDIR/$name.pid" ] && break; sleep 0.1; done
	log "started $name 127.0.0.1:$port -> $NS $target (pid $(cat "$RUNDIR/$name.pid"))"
}

# stop NAME...: stop the recorded processes (TERM, then KILL after 10 s).
stop() {
	local name pid i
	for name in "$@"; do
		[ -f "$RUNDIR/$name.pid" ] || continue
		pid=$(cat "$RUNDIR/$name.pid")
		if kill -0 "$pid" 2>/dev/null; then
			kill "$pid"
			for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
			kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
		fi
		rm -f "$RUNDIR/$name.pid"
		log "stopped $name ($pid)"
	done
}

# waitfor SECONDS CMD...: retry CMD once a second until it succeeds.
waitfor() {
	local t=$1 s
	shift
	s=$(date +%s)
	until "$@" >/dev/null 2>&1; do
		[ $(($(date +%s) - s)) -ge "$t" ] && { log "timeout after ${t}s: $*"; return 1; }
		sleep 1
	done
}

# built KEY: whether $OPT/KEY was completely built (the marker is written last).
built() { [ -f "$OPT/$1/.done" ]; }
done_marker() { date -u +%FT%TZ >"$OPT/$1/.done"; }

# timed NAME CMD...: run a build step with its output in $LOGS/NAME.log.
timed() {
	local name=$1 s
	shift
	s=$(date +%s)
	log "building $name (log: $LOGS/$name.log)"
	# Not `if ! "$@"`: bash ignores set -e inside anything run as a
	# condition, so a failing step would go on and mark itself built.
	local rc
	set +e
	(
		set -e
		"$@"
	) >"$LOGS/$name.log" 2>&1
	rc=$?
	set -e
	if [ "$rc" != 0 ]; then
		tail -20 "$LOGS/$name.log" >&2
		die "$name failed, see $LOGS/$name.log"
	fi
	log "built $name in $(($(date +%s) - s))s"
}

# link_bins KEY: put $OPT/KEY/bin/* on PATH ($BIN), replacing older versions.
link_bins() {
	local f
	for f in "$OPT/$1"/bin/*; do
		[ -e "$f" ] || die "$OPT/$1/bin is empty"
		ln -sfn "$f" "$BIN/$(basename "$f")"
	done
}

# srccopy MODULE@VERSION DIR: a writable copy of a module's source, for the
# components built from their own go.mod (its replace directives apply only
# when it is the main module).
srccopy() {
	local mod=$1 dir=$2 src
	[ -d "$dir" ] && return 0
	mkdir -p "$(dirname "$dir")"
	go mod download "$mod"
	src=$(go mod download -json "$mod" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -n "$src" ] || die "no module dir for $mod"
	cp -r "$src" "$dir.tmp"
	chmod -R u+w "$dir.tmp"
	mv "$dir.tmp" "$dir"
}

# kube ARGS...: kubectl against the cluster (quiet about warnings).
kube() { kubectl "$@"; }
