#!/usr/bin/env bash
# Installs what `make test` needs on a fresh machine, when it is missing,
# before any test runs. Called by `make test` (its first step) and by
# .ci/run, so the README's command alone does the set-up.
#
# What the tests need beyond Go 1.26:
#   gcc             go test -race needs cgo
#   openssh-server  /usr/sbin/sshd: the remote, GCE and AWS tests start a
#                   real sshd on their own port (never as a service)
#   iproute2        ip: network namespaces for the VPC fakes (as root)
#   keepalived      /usr/sbin/keepalived: the metal lab's VIP self-test runs
#                   real VRRP between hosts (make test-metal; never a service)
#   haproxy         /usr/sbin/haproxy: the metal lab's TCP forwarding
#                   self-test (make test-metal; never a service)
#   nftables        /usr/sbin/nft: the VIP's planned handoff drops new
#                   connections to the VIP on the old holder while it
#                   moves (make test-metal; the ruleset is never loaded as
#                   a service)
#   sudo            /usr/bin/sudo: remote's tests run commands through
#                   sudo -n (a non-root login's path), and the metal lab's
#                   login user is not root
#   moto            moto_server: the AWS provider tests (a Python package,
#                   not a Debian one: checked, and how to get it said)
# and about 12 GB free under TMPDIR (a warning before any test when not).
#
# Debian packages are installed with apt-get when the user is root (or has
# passwordless sudo), without starting any service (a policy-rc.d refuses
# while apt runs). Otherwise it names each missing package and the command
# that installs it, and exits 2 before any test runs.
#
#   scripts/test-prereqs.sh           # check, install what is missing
#   scripts/test-prereqs.sh --check   # only check: exit 2 if anything is missing
#
# Exit status: 0 ready; 2 something missing that could not be installed.
set -euo pipefail

check_only=false
case "${1:-}" in
--check) check_only=true ;;
"") ;;
-h | --help)
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "test-prereqs.sh: unknown argument $1 (valid: --check, --help)" >&2
	exit 2
	;;
esac

MOTO_VERSION=5.2.1 # what the AWS suite is tested with (testbed/aws/awstest)

# command -> Debian package; a command found on PATH (or the sshd path) is
# enough.
missing=()
have() { command -v "$1" >/dev/null 2>&1; }
have gcc || missing+=(gcc)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
have ip || missing+=(iproute2)
[ -x /usr/sbin/keepalived ] || missing+=(keepalived)
[ -x /usr/sbin/haproxy ] || missing+=(haproxy)
[ -x /usr/sbin/nft ] || missing+=(nftables)
[ -x /usr/bin/sudo ] || missing+=(sudo)
have make || missing+=(make)

if [ ${#missing[@]} -gt 0 ]; then
	cmd="apt-get update && apt-get install -y ${missing[*]}"
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then
		if have sudo && sudo -n true 2>/dev/null; then
			SUDO="sudo -n"
		else
			SUDO=none
		fi
	fi
	if $check_only || [ "$SUDO" = none ] || ! have apt-get; then
		echo "test-prereqs: missing Debian package(s): ${missing[*]}" >&2
		for p in "${missing[@]}"; do
			case $p in
			gcc) echo "  gcc: go test -race needs cgo" >&2 ;;
			openssh-server) echo "  openssh-server: /usr/sbin/sshd, started by the remote, GCE and AWS tests on their own port" >&2 ;;
			iproute2) echo "  iproute2: ip, for the VPC fakes' network namespaces" >&2 ;;
			make) echo "  make: the README's commands" >&2 ;;
			keepalived) echo "  keepalived: /usr/sbin/keepalived, the metal lab's VRRP self-test (started by the test, never as a service)" >&2 ;;
			haproxy) echo "  haproxy: /usr/sbin/haproxy, the metal lab's TCP forwarding self-test (started by the test, never as a service)" >&2 ;;
			nftables) echo "  nftables: /usr/sbin/nft, the VIP's handoff drops new connections on the old holder (make test-metal)" >&2 ;;
			esac
		done
		if ! have apt-get; then
			echo "install them with your system's package manager (Debian: $cmd)" >&2
		else
			echo "install them as root: sudo sh -c '$cmd'" >&2
		fi
		exit 2
	fi
	echo "test-prereqs: installing ${missing[*]} (apt-get, no services started)"
	export DEBIAN_FRONTEND=noninteractive
	# Packages must not start services (sshd is started by the tests on a
	# loopback port, keepalived and haproxy inside the metal lab's hosts): a
	# policy-rc.d that refuses, unless one exists already.
	policy=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		policy=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
		$SUDO chmod +x "$policy"
		trap '$SUDO rm -f "$policy"' EXIT
	fi
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	for p in "${missing[@]}"; do
		echo "test-prereqs: installed $p $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null)"
	done
fi

# Disk: the tests' temporary directories peak near 8 GB under TMPDIR
# during make test (etcd preallocates 64 MB WAL segments, two per member,
# for every cluster the tests start), and the build cache needs ~4 GB
# more from empty. Said before any test runs; not fatal (a disk other
# jobs share may free up), but "no space left on device" in the middle of
# make test is what too little looks like.
tmp=${TMPDIR:-/tmp}
free_kb=$(df -Pk "$tmp" 2>/dev/null | awk 'NR == 2 {print $4}')
if [ -n "$free_kb" ] && [ "$free_kb" -lt $((12 * 1024 * 1024)) ]; then
	echo "test-prereqs: warning: $((free_kb / 1024)) MB free under $tmp; make test needs about 12 GB there (8 GB of test data at its peak, 4 GB of build cache from empty): free some, or point TMPDIR (and GOCACHE) at a larger disk" >&2
fi

if have moto_server && python3 -c 'import moto' >/dev/null 2>&1; then
	echo "test-prereqs: ready (gcc, sshd, ip, keepalived, haproxy; moto $(python3 -c 'import moto; print(moto.__version__)'))"
else
	echo "test-prereqs: moto_server not found: the AWS provider tests need it." >&2
	echo "  install it (a Python package, not a Debian one): python3 -m pip install 'moto[server]==$MOTO_VERSION'" >&2
	exit 2
fi
