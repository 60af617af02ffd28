#!/usr/bin/env bash
# make demo: the main job on the embedded local provider with a real
# kube-apiserver, start to finish: build kube-apiserver and kubectl (with
# kube-controller-manager, kube-scheduler and kubeadm) on first use →
# local up --control-plane real → add-replica ×2 → status →
# hamaster kubeconfig → kubectl through the LB endpoint → remove-replica →
# status → kubectl again → local down. Nothing is left behind but the
# binaries in the per-user cache.
#
# DEMO_CONTROL_PLANE=standin runs the same job on the apiserver stand-in
# (no kube-apiserver build; /kv instead of kubectl).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
VERSION=${DEMO_VERSION:-v1.33.13}
CONTROL_PLANE=${DEMO_CONTROL_PLANE:-real}
export HAMASTER_STATE_DIR=${HAMASTER_STATE_DIR:-$(mktemp -d -t hamaster-demo-XXXX)}
export HAMASTER_CLUSTER=${HAMASTER_CLUSTER:-demo}
export HAMASTER_NODE_BINARY=$PWD/$BIN/hamaster-node
export HAMASTER_KUBE_APISERVER_DIR=${HAMASTER_KUBE_APISERVER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hamaster/kube-apiserver}
hm() { "$BIN/hamaster" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() {
	say "local down"
	hm local down --yes || true
	rm -rf "$HAMASTER_STATE_DIR"
}
start=$(date +%s)

if [ "$CONTROL_PLANE" = real ]; then
	if [ -x "$HAMASTER_KUBE_APISERVER_DIR/$VERSION/kube-apiserver" ]; then
		say "kube-apiserver $VERSION: in $HAMASTER_KUBE_APISERVER_DIR/$VERSION (checking its checksum)"
	else
		say "kube-apiserver $VERSION: not built yet; building it, kubectl, kube-controller-manager, kube-scheduler and kubeadm from k8s.io/kubernetes (first time only: about 7 minutes on 2 cores)"
	fi
	./tools/kube-apiserver/build.sh "$VERSION"
	kubectl=$HAMASTER_KUBE_APISERVER_DIR/$VERSION/kubectl
fi
trap cleanup EXIT
up_start=$(date +%s)

say "local up: one master ($CONTROL_PLANE control plane, $VERSION), the static IP attached to it"
# The real apiserver publishes each replica's address in the kubernetes
# Endpoints, which refuse loopback addresses: its replicas live in
# 198.19.N.0/24, which local up adds to lo (root needed). Not root: the
# same demo on 127.0.N.x, without the Endpoints.
addresses=()
if [ "$CONTROL_PLANE" = real ] && [ "$(id -u)" -ne 0 ]; then
	echo "(not root: replicas on loopback addresses; 'kubectl get endpoints kubernetes' will list none. Run as root for 198.19.N.0/24 on lo.)"
	addresses=(--addresses loopback)
fi
hm local up --control-plane "$CONTROL_PLANE" --version "$VERSION" "${addresses[@]}"

say "add-replica #1: the static IP is promoted to a load balancer"
hm add-replica --yes
say "add-replica #2"
hm add-replica --yes

say "status"
hm status

ip=$(hm --output json status | sed -n 's/.*"static_ip": "\(.*\)".*/\1/p' | head -1)
victim=$(hm --output json status | sed -n 's/.*"name": "\('"$HAMASTER_CLUSTER"'-master-[0-9a-f]\{3\}\)".*/\1/p' | head -1)

if [ "$CONTROL_PLANE" = real ]; then
	kc=$HAMASTER_STATE_DIR/kubeconfig
	say "hamaster kubeconfig: a client certificate signed by the cluster CA, server https://$ip:6443"
	hm kubeconfig --file "$kc"
	k() { echo "\$ kubectl $*"; "$kubectl" --kubeconfig "$kc" "$@"; }
	say "kubectl through the LB endpoint https://$ip:6443"
	k get ns
	k get endpoints kubernetes || true
	k create configmap demo --from-literal=written="$(date -u +%FT%TZ)"
	k get configmap demo -o jsonpath='{.data.written}{"\n"}'

	say "remove-replica $victim"
	hm remove-replica --name "$victim" --drain-grace 3s --yes
	say "status"
	hm status
	say "kubectl after the removal, through the same endpoint"
	k get configmap demo -o jsonpath='{.data.written}{"\n"}'
	k get --raw /readyz
	echo
	# Each apiserver publishes its own address (198.19.N.x: local up's
	# default for the real apiserver); the removed replica's entry leaves
	# when its lease expires (15 s TTL): wait for it, bounded.
	want=$(hm --output json status | grep -c '"address": "198\.19\.' || true)
	[ ${#addresses[@]} -eq 0 ] || want=0
	for _ in $(seq 1 40); do
		have=$("$kubectl" --kubeconfig "$kc" get endpoints kubernetes -o jsonpath='{range .subsets[*].addresses[*]}{.ip}{"\n"}{end}' 2>/dev/null | grep -c . || true)
		[ "$have" = "$want" ] && break
		sleep 1
	done
	k get endpoints kubernetes || [ ${#addresses[@]} -ne 0 ]
else
	ca=$HAMASTER_STATE_DIR/$HAMASTER_CLUSTER/pki/ca.crt
	# /kv needs a client certificate signed by the cluster CA (health paths are open).
	auth=(--cacert "$ca" --cert "$HAMASTER_STATE_DIR/$HAMASTER_CLUSTER/pki/etcd-client.crt" --key "$HAMASTER_STATE_DIR/$HAMASTER_CLUSTER/pki/etcd-client.key")
	say "write and read through the LB endpoint https://$ip:6443"
	curl -sS --fail -o /dev/null "${auth[@]}" -X PUT --data "written at $(date -u +%FT%TZ)" "https://$ip:6443/kv/demo-key"
	echo "PUT /kv/demo-key ok"
	echo "GET /kv/demo-key → $(curl -sS --fail "${auth[@]}" "https://$ip:6443/kv/demo-key")"
	say "remove-replica $victim"
	hm remove-replica --name "$victim" --drain-grace 1s --yes
	say "status"
	hm status
	echo "GET /kv/demo-key after the removal → $(curl -sS --fail "${auth[@]}" "https://$ip:6443/kv/demo-key")"
fi

say "demo finished in $(( $(date +%s) - start ))s ($(( $(date +%s) - up_start ))s from local up)"
