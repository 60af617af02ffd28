package kubeadm

import (
	"cmp"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Former endpoints. A worker's kubelet.conf names the endpoint the
// cluster had when it joined (kubeadm join copies cluster-info's server,
// and no later kubeadm command moves it: workers.go). When `hamaster
// endpoint set` moves the endpoint again (a VIP to a DNS name, one load
// balancer to another), such a worker still names the old one, which
// the operator will retire. SetEndpoint therefore records each endpoint
// it replaces in AnnotationFormerEndpoints on kubeadm-config, and
// PointWorkers moves a worker that names one of them, as it moves one
// that names a master's own address; the pin check names it until then.
// A worker that names any other address (a node-local proxy of the
// operator's, as kubespray's localhost load balancing puts on every
// worker) is left alone.

// AnnotationFormerEndpoints on kube-system/kubeadm-config lists, comma
// separated and oldest first, the endpoints (host:port) the cluster had
// before its current controlPlaneEndpoint, as SetEndpoint replaced them.
const AnnotationFormerEndpoints = "hamaster.io/former-endpoints"

// maxFormerEndpoints bounds the list: the oldest go first.
const maxFormerEndpoints = 8

// FormerEndpointsAfter is the annotation's value (list, as read) once
// the endpoint moves from old ("" for none) to now: old added last,
// now removed (a cluster moved back to an endpoint has it again), no
// endpoint twice, at most maxFormerEndpoints kept.
func FormerEndpointsAfter(list, old, now string) string {
	var out []string
	add := func(e string) {
		e = strings.TrimSpace(e)
		if e == "" || sameEndpoint(e, now) || slices.ContainsFunc(out, func(o string) bool { return sameEndpoint(o, e) }) {
			return
		}
		out = append(out, e)
	}
	for e := range strings.SplitSeq(list, ",") {
		add(e)
	}
	add(old)
	if len(out) > maxFormerEndpoints {
		out = out[len(out)-maxFormerEndpoints:]
	}
	return strings.Join(out, ",")
}

// ParseFormerEndpoints is the annotation's list, nil when empty.
func ParseFormerEndpoints(v string) []string {
	var out []string
	for e := range strings.SplitSeq(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// sameEndpoint reports whether two endpoints (host:port, or a host alone:
// kubeadm's bind port, DefaultBindPort) are one.
func sameEndpoint(a, b string) bool {
	ea, oka := normEndpoint(a)
	eb, okb := normEndpoint(b)
	if !oka || !okb {
		return a == b
	}
	return ea.Port == eb.Port && sameSAN(ea.Host, eb.Host)
}

// normEndpoint is the endpoint s names, its port DefaultBindPort when it
// has none (kubeadm's controlPlaneEndpoint without a port is reached on
// the apiserver's bind port).
func normEndpoint(s string) (Endpoint, bool) {
	ep, err := SplitEndpoint(s)
	if err != nil {
		return Endpoint{}, false
	}
	if ep.Port == 0 {
		ep.Port = DefaultBindPort
	}
	return ep, true
}

// formerNamed is the endpoint among formers that server (a kubeconfig's
// https://host:port; port 443 when it has none) names, "" for none.
func formerNamed(formers []string, server string) string {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return ""
	}
	port := cmp.Or(u.Port(), "443")
	for _, e := range formers {
		if ep, ok := normEndpoint(e); ok && sameSAN(ep.Host, u.Hostname()) && strconv.Itoa(ep.Port) == port {
			return e
		}
	}
	return ""
}
