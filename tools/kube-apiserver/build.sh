#!/usr/bin/env bash
# Builds kube-apiserver and kubectl at each pinned version that is not yet in
# the per-user cache, and records their sha256:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/hamaster/kube-apiserver/<version>/
#       kube-apiserver  kubectl  SHA256SUMS
#
# (HAMASTER_KUBE_APISERVER_DIR overrides the directory, as it does for
# 'hamaster local up --kube-apiserver-dir').
#
#   tools/kube-apiserver/build.sh            # every pinned version
#   tools/kube-apiserver/build.sh v1.34.4    # one of them
#
# A version is pinned by tools/kube-apiserver/v1.MINOR/go.mod (written by
# gomod.sh). A cached version whose SHA256SUMS no longer matches its files is
# rebuilt. The first build of a version takes minutes (about 4 on 2 cores);
# later ones only check the checksums.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMASTER_KUBE_APISERVER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hamaster/kube-apiserver}

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
	if [ -f "$out/SHA256SUMS" ] && [ "$(cat "$out/BUILT_FROM" 2>/dev/null)" = "$from" ] &&
		(cd "$out" && sha256sum --quiet -c SHA256SUMS) 2>/dev/null; then
		echo "kube-apiserver $version: cached in $out (checksums match)"
		continue
	fi
	echo "kube-apiserver $version: building into $out (the first build takes minutes)"
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
	(cd "$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
	(cd "$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl)
	(cd "$tmp" && sha256sum kube-apiserver kubectl > SHA256SUMS)
	mv -f "$tmp/kube-apiserver" "$tmp/kubectl" "$out/"
	mv -f "$tmp/SHA256SUMS" "$out/SHA256SUMS"
	echo "$from" > "$out/BUILT_FROM"
	rm -rf "$tmp"
	trap - EXIT
	echo "kube-apiserver $version: built in $(( $(date +%s) - start ))s ($(du -h "$out/kube-apiserver" | cut -f1)): $out/kube-apiserver"
done
echo "kube-apiserver ${versions[*]}: ready in $(( $(date +%s) - all_start ))s under $cache"
