package aws

import "testing"

func TestAddrMap(t *testing.T) {
	m, err := parseAddrMap("10.0.1.0/24=127.0.42.0/24,54.1.2.3/32=127.0.42.1/32,10.0.1.1/32=127.0.43.1/32")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cloud, net string }{
		{"10.0.1.10", "127.0.42.10"},
		{"54.1.2.3", "127.0.42.1"},
		{"10.0.1.1", "127.0.43.1"},
		{"192.0.2.7", "192.0.2.7"},
	} {
		if got := m.toNet(c.cloud); got != c.net {
			t.Errorf("toNet(%s) = %s, want %s", c.cloud, got, c.net)
		}
		if got := m.toCloud(c.net); got != c.cloud {
			t.Errorf("toCloud(%s) = %s, want %s", c.net, got, c.cloud)
		}
	}
	for _, bad := range []string{"10.0.0.0/16=127.0.0.0/24", "x=y", "10.0.0.0/24"} {
		if _, err := parseAddrMap(bad); err == nil {
			t.Errorf("parseAddrMap(%q) accepted", bad)
		}
	}
}
