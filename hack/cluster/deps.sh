#!/usr/bin/env bash
# Install the Debian packages the cluster needs when any is missing (run by
# up.sh; as root). containerd and runc run the pods, the CNI plugins wire
# them, iptables/conntrack serve kube-proxy, socat the host forwards.
set -euo pipefail
pkgs="containerd runc containernetworking-plugins iptables conntrack nftables socat ethtool ipset kmod openssl curl iproute2 util-linux ca-certificates"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
