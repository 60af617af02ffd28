package gcefake

import (
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// HealthCheckRanges are the source ranges of Google Cloud's health-check
// probes that a firewall rule must let in for a load balancer to see a
// backend healthy ("Probe IP ranges and firewall rules",
// cloud.google.com/load-balancing/docs/health-check-concepts). The fake's
// health checker counts a backend as reachable only when every range is
// allowed; a rule letting in only some is GCE's "misconfigured" state,
// which also fails checks.
var HealthCheckRanges = []string{"35.191.0.0/16", "130.211.0.0/22"}

// insertFirewall validates a new firewall rule. Called with s.mu held.
func (s *Server) insertFirewall(it map[string]any) (func() *apiError, *apiError) {
	it["kind"] = "compute#firewall"
	if str(it, "direction") == "" {
		it["direction"] = "INGRESS"
	}
	if str(it, "network") == "" {
		it["network"] = s.link("global/networks/default")
	}
	if len(list(it, "allowed")) == 0 && len(list(it, "denied")) == 0 {
		return nil, errf(400, "invalid", "Invalid value for field 'resource.allowed': ''. Must specify at least one of allowed or denied.")
	}
	for i, r := range list(it, "sourceRanges") {
		if _, err := netip.ParsePrefix(r.(string)); err != nil {
			if _, err := netip.ParseAddr(r.(string)); err != nil {
				return nil, errf(400, "invalid", "Invalid value for field 'resource.sourceRanges[%d]': '%s'. Must be a CIDR address range that is contained in the network.", i, r)
			}
		}
	}
	return func() *apiError { return s.syncLBs() }, nil
}

// probeBlocked says why health-check probes on port cannot reach the
// instance ("" when a rule lets every probe range in). Called with s.mu
// held.
func (s *Server) probeBlocked(in map[string]any, port int) string {
	nic := obj(list(in, "networkInterfaces")[0])
	network := lastSeg(str(nic, "network"))
	var tags []string
	for _, t := range list(obj(in["tags"]), "items") {
		tags = append(tags, t.(string))
	}
	allowed := map[string]bool{}
	for _, fw := range s.res["global/firewalls"] {
		if !s.visible(fw) || str(fw, "direction") != "INGRESS" || lastSeg(str(fw, "network")) != network {
			continue
		}
		if d, _ := fw["disabled"].(bool); d {
			continue
		}
		if tt := list(fw, "targetTags"); len(tt) > 0 && !anyIn(tt, tags) {
			continue
		}
		if !allowsTCP(list(fw, "allowed"), port) {
			continue
		}
		for _, want := range HealthCheckRanges {
			w := netip.MustParsePrefix(want)
			for _, r := range list(fw, "sourceRanges") {
				if p, err := netip.ParsePrefix(r.(string)); err == nil && p.Bits() <= w.Bits() && p.Contains(w.Addr()) {
					allowed[want] = true
				}
			}
		}
	}
	var missing []string
	for _, want := range HealthCheckRanges {
		if !allowed[want] {
			missing = append(missing, want)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return "no firewall rule of network " + network + " allows tcp:" + strconv.Itoa(port) + " from " + strings.Join(missing, ", ") + " to this instance's tags " + strings.Join(tags, ",")
}

func anyIn(want []any, have []string) bool {
	for _, w := range want {
		for _, h := range have {
			if w == h {
				return true
			}
		}
	}
	return false
}

// allowsTCP reports whether a rule's allowed list admits tcp:port.
func allowsTCP(allowed []any, port int) bool {
	for _, a := range allowed {
		a := obj(a)
		proto := str(a, "IPProtocol")
		if proto != "tcp" && proto != "all" && proto != "6" {
			continue
		}
		ports := list(a, "ports")
		if len(ports) == 0 {
			return true
		}
		for _, p := range ports {
			lo, hi, ok := strings.Cut(p.(string), "-")
			if !ok {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && l <= port && port <= h {
				return true
			}
		}
	}
	return false
}

// visible reports whether a resource has appeared to readers yet
// (Options.Visibility). Called with s.mu held.
func (s *Server) visible(it map[string]any) bool {
	at := str(it, "_visibleAt")
	if at == "" {
		return true
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	return err != nil || !time.Now().Before(t)
}
