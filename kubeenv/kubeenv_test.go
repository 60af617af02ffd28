package kubeenv

import (
	"maps"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	cases := []map[string]string{
		{},
		{"INITIAL_ETCD_CLUSTER": "a=https://10.0.0.2:2380,b=https://10.0.0.3:2380", "ETCD_INITIAL_CLUSTER_STATE": "existing"},
		{"QUOTED": "it's 'quoted'", "EMPTY": "", "COLON": "a: b", "HASH": "#not a comment"},
	}
	for _, in := range cases {
		out, err := Decode(Encode(in))
		if err != nil || !maps.Equal(in, out) {
			t.Errorf("Decode(Encode(%v)) = %v, %v", in, out, err)
		}
	}
	files := map[string][]byte{"ca.crt": []byte("-----BEGIN CERTIFICATE-----\n..."), "etcd-peer.key": {0, 1, 2}}
	got, err := DecodeFiles(EncodeFiles(files))
	if err != nil || len(got) != 2 || string(got["ca.crt"]) != string(files["ca.crt"]) {
		t.Errorf("files round trip: %v, %v", got, err)
	}
	if _, err := Decode("not a line"); err == nil {
		t.Error("Decode accepted a line without a colon")
	}
}
