#!/usr/bin/env bash
# Builds the Kubernetes binaries hamaster runs -- kube-apiserver,
# kube-controller-manager, kube-scheduler, kubeadm and kubectl -- at each
# pinned version that is not yet complete in the per-user cache, and records
# their sha256:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/hamaster/kube-apiserver/<version>/
#       kube-apiserver  kube-controller-manager  kube-scheduler  kubeadm
#       kubectl  SHA256SUMS  BUILT_FROM
#
# (The directory keeps its first name, kube-apiserver: it is the path that
# 'hamaster local up --kube-apiserver-dir' and the node's KUBE_APISERVER_DIR
# take.)
#
# (HAMASTER_KUBE_APISERVER_DIR overrides the directory, as it does for
# 'hamaster local up --kube-apiserver-dir').
#
#   tools/kube-apiserver/build.sh            # every pinned version
#   tools/kube-apiserver/build.sh v1.34.4    # one of them
#
# A version is pinned by tools/kube-apiserver/v1.MINOR/go.mod (written by
# gomod.sh). A cached version is rebuilt, all five binaries, when one of them
# is missing or not in SHA256SUMS, when SHA256SUMS no longer matches the
# files, or when go.mod, go.sum or this script changed (BUILT_FROM). Each
# binary is built into a temporary directory beside the cache and renamed
# into place, so a reader never sees a partial file. The first build of a
# version takes minutes (the per-binary seconds are printed); later runs only
# check the checksums.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMASTER_KUBE_APISERVER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hamaster/kube-apiserver}

# The binaries, each built from k8s.io/kubernetes/cmd/<name>.
bins=(kube-apiserver kube-controller-manager kube-scheduler kubeadm kubectl)

pinned() {
	for mod in "$here"/v1.*/go.mod; do
		sed -n 's/^\(require\)\{0,1\}[[:space:]]*k8s.io\/kubernetes \(v[0-9.]*\)\( \/\/ indirect\)\{0,1\}$/\2/p' "$mod" | head -1
	done
}

all_start=$(date +%s)
versions=("$@")
[ ${#versions[@]} -gt 0 ] || mapfile -t versions < <(pinned)

for version in "${versions[@]}"; do
	[[ $version =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || { echo "build.sh: version $version: want v1.MINOR.PATCH" >&2; exit 2; }
	moddir=$here/v1.${BASH_REMATCH[1]}
	if ! pinned | grep -x "$version" >/dev/null; then
		echo "build.sh: version $version is not pinned (pinned: $(pinned | tr '\n' ' '))" >&2
		exit 2
	fi
	out=$cache/$version
	# What the binaries are built from: a changed go.mod, go.sum or this
	# script rebuilds them.
	from=$(cat "$moddir/go.mod" "$moddir/go.sum" "$here/build.sh" | sha256sum | cut -d' ' -f1)
	complete=true
	for b in "${bins[@]}"; do
		[ -f "$out/$b" ] && grep -q "  $b\$" "$out/SHA256SUMS" 2>/dev/null || complete=false
	done
	if $complete && [ "$(cat "$out/BUILT_FROM" 2>/dev/null)" = "$from" ] &&
		(cd "$out" && sha256sum --quiet -c SHA256SUMS) 2>/dev/null; then
		echo "kubernetes $version: cached in $out (${bins[*]}: checksums match)"
		continue
	fi
	echo "kubernetes $version: building ${bins[*]} into $out (the first build takes minutes)"
	start=$(date +%s)
	mkdir -p "$out"
	tmp=$(mktemp -d "$out/.build-XXXX")
	trap 'rm -rf "$tmp"' EXIT
	# What /version reports: the workflows compare it with the template's version.
	commit=$(cd "$moddir" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
	ld="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=${BASH_REMATCH[1]}"
		ld+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit=$commit -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	# One go build per binary, timed: packages they share come from the
	# build cache, so a later binary's time is what it adds.
	for b in "${bins[@]}"; do
		bstart=$(date +%s)
		if ! (cd "$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$tmp/$b" "k8s.io/kubernetes/cmd/$b"); then
			echo "build.sh: go build k8s.io/kubernetes/cmd/$b $version (in $moddir) failed" >&2
			exit 1
		fi
		echo "kubernetes $version: $b built in $(( $(date +%s) - bstart ))s ($(du -h "$tmp/$b" | cut -f1))"
	done
	(cd "$tmp" && sha256sum "${bins[@]}" > SHA256SUMS)
	echo "$from" > "$tmp/BUILT_FROM"
	# Each rename is atomic (same file system). SHA256SUMS and BUILT_FROM go
	# last: a run interrupted before them leaves binaries that do not match
	# the old SHA256SUMS, so the next run rebuilds.
	for b in "${bins[@]}" SHA256SUMS BUILT_FROM; do
		mv -f "$tmp/$b" "$out/$b"
	done
	rm -rf "$tmp"
	trap - EXIT
	echo "kubernetes $version: built in $(( $(date +%s) - start ))s: $out/{$(IFS=,; echo "${bins[*]}")}"
done
echo "kubernetes ${versions[*]}: ready in $(( $(date +%s) - all_start ))s under $cache"
