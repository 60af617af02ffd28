package vip

import (
	"maps"
	"strings"
	"testing"
)

func TestParseProbeCounters(t *testing.T) {
	t.Parallel()
	// nft 1.0.6's listing of the table probeCountersScript writes.
	out := `table ip hamaster_vrrp_probe {
	chain input {
		type filter hook input priority 100; policy accept;
		ip protocol vrrp ip saddr 10.0.0.2 counter packets 3 bytes 108
		ip protocol vrrp ip saddr 10.0.0.3 counter packets 0 bytes 0
	}
}
`
	if got, want := parseProbeCounters([]byte(out)), map[string]int{"10.0.0.2": 3, "10.0.0.3": 0}; !maps.Equal(got, want) {
		t.Errorf("parseProbeCounters = %v, want %v", got, want)
	}
}

func TestProbeScriptsNameEveryOtherPeer(t *testing.T) {
	t.Parallel()
	peers := []VRRPPeer{{Address: "10.0.0.1"}, {Address: "10.0.0.2"}, {Address: "10.0.0.3"}}
	counters := probeCountersScript("10.0.0.1", peers)
	if strings.Count(counters, "ip saddr ") != 2 || strings.Contains(counters, "saddr 10.0.0.1 ") {
		t.Errorf("the counters are not one per other peer:\n%s", counters)
	}
	conf := probeConf(51, "eth0", "10.0.0.1", peers)
	for _, want := range []string{"virtual_router_id 51", "priority 255", "unicast_src_ip 10.0.0.1", "vrrp_version 2", "unicast_peer {\n    10.0.0.2\n    10.0.0.3\n  }"} {
		if !strings.Contains(conf, want) {
			t.Errorf("probe conf lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "virtual_ipaddress") {
		t.Errorf("the probe must add no address:\n%s", conf)
	}
}
