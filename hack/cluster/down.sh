#!/usr/bin/env bash
# Stop the cluster hack/cluster/up.sh started: every process it recorded (by
# pid, nothing by name), the pods' mounts and network namespaces, the node's
# namespace and the cgroups it made, then its state ($STATE). The build cache
# stays, so the next up.sh starts in a minute or so.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
set +e # tear down as much as possible even when one step fails
T0=$(date +%s)
SOCK=$STATE/containerd/containerd.sock
ctr_() { nsx ctr -a "$SOCK" -n k8s.io "$@"; }

if running kube-apiserver && running kubelet; then
	# Let the kubelet tear pods down (CNI DEL, unmounts): first stop what
	# recreates them, then delete the pods.
	kubectl delete ksvc --all -A --wait=false >/dev/null 2>&1
	kubectl delete deploy,rs,ds,statefulset,job --all -A --wait=false >/dev/null 2>&1
	kubectl delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1
	for i in $(seq 60); do
		[ "$(ctr_ tasks ls -q 2>/dev/null | wc -l)" = 0 ] && break
		sleep 1
	done
fi
stop kubelet
if running containerd && [ -S "$SOCK" ]; then
	# Whatever is left: note its netns, kill it, remove it.
	for c in $(ctr_ containers ls -q 2>/dev/null); do
		ctr_ containers info "$c" 2>/dev/null | grep -o '"/var/run/netns/cni-[^"]*"\|"/run/netns/cni-[^"]*"' | tr -d '"' >>"$STATE/leftover-netns"
		ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1
	done
	sleep 1
	for c in $(ctr_ containers ls -q 2>/dev/null); do
		ctr_ tasks rm -f "$c" >/dev/null 2>&1
		ctr_ containers rm "$c" >/dev/null 2>&1
	done
fi
stop traefik kube-proxy containerd kube-scheduler kube-controller-manager kube-apiserver etcd registry \
	fwd-apiserver fwd-registry fwd-ingress
# containerd-shim processes outlive containerd by design; they are ours
# because their -address is our socket.
for p in $(pgrep -f "containerd-shim.*-address $SOCK" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
# pod sandbox namespaces containerd made and did not remove
for p in $(sort -u "$STATE/leftover-netns" 2>/dev/null); do
	ip netns del "$(basename "$p")" 2>/dev/null && log "removed netns $(basename "$p")"
done
# mounts below our state (kubelet volumes, overlay rootfs, shm), deepest first
grep -o " $STATE[^ ]*" /proc/mounts | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
ip netns del "$NS" 2>/dev/null && log "removed netns $NS"
# cgroups we made (pods' tree below our memory cgroup), deepest first
cgroot=$(cat "$STATE/cgroot" 2>/dev/null)
if [ -n "$cgroot" ]; then
	for h in /sys/fs/cgroup/*/; do
		[ -d "$h$cgroot" ] && find "$h$cgroot" -depth -type d -exec rmdir {} \; 2>/dev/null
	done
fi
for d in $(sort -u "$STATE/cgroup-made" 2>/dev/null); do
	[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
done
rm -rf "$STATE"
log "down in $(($(date +%s) - T0))s"
