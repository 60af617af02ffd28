#!/usr/bin/env bash
# make demo: the main job on the embedded local provider, start to finish:
# local up → add-replica ×2 → status → a write/read through the LB
# endpoint → remove-replica → status → local down. Nothing is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
export HAMASTER_STATE_DIR=${HAMASTER_STATE_DIR:-$(mktemp -d -t hamaster-demo-XXXX)}
export HAMASTER_CLUSTER=${HAMASTER_CLUSTER:-demo}
export HAMASTER_NODE_BINARY=$PWD/$BIN/hamaster-node
hm() { "$BIN/hamaster" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() {
	say "local down"
	hm local down --yes || true
	rm -rf "$HAMASTER_STATE_DIR"
}
trap cleanup EXIT
start=$(date +%s)

say "local up: one master, the static IP attached to it"
hm local up --version v1.30.2

say "add-replica #1: the static IP is promoted to a load balancer"
hm add-replica --yes
say "add-replica #2"
hm add-replica --yes

say "status"
hm status

ip=$(hm --output json status | sed -n 's/.*"static_ip": "\(.*\)".*/\1/p' | head -1)
ca=$HAMASTER_STATE_DIR/$HAMASTER_CLUSTER/pki/ca.crt
# /kv needs a client certificate signed by the cluster CA (health paths are open).
auth=(--cacert "$ca" --cert "$HAMASTER_STATE_DIR/$HAMASTER_CLUSTER/pki/etcd-client.crt" --key "$HAMASTER_STATE_DIR/$HAMASTER_CLUSTER/pki/etcd-client.key")
say "write and read through the LB endpoint https://$ip:6443"
curl -sS --fail -o /dev/null "${auth[@]}" -X PUT --data "written at $(date -u +%FT%TZ)" "https://$ip:6443/kv/demo-key"
echo "PUT /kv/demo-key ok"
echo "GET /kv/demo-key → $(curl -sS --fail "${auth[@]}" "https://$ip:6443/kv/demo-key")"

victim=$(hm --output json status | sed -n 's/.*"name": "\('"$HAMASTER_CLUSTER"'-master-[0-9a-f]\{3\}\)".*/\1/p' | head -1)
say "remove-replica $victim"
hm remove-replica --name "$victim" --drain-grace 1s --yes

say "status"
hm status
echo "GET /kv/demo-key after the removal → $(curl -sS --fail "${auth[@]}" "https://$ip:6443/kv/demo-key")"

say "demo finished in $(( $(date +%s) - start ))s"
