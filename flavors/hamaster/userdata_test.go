package hamaster

import (
	"reflect"
	"testing"

	"github.com/hamaster/hamaster/providers"
)

func TestUserDataRoundTrip(t *testing.T) {
	cases := []providers.Template{
		{Version: "v1.30.2", Env: map[string]string{"INITIAL_ETCD_CLUSTER": "a=https://10.0.1.10:2380,b=https://10.0.1.11:2380", "QUOTED": "it's"}, Files: map[string][]byte{"ca.crt": []byte("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")}, ExtraArgs: []string{"--a=1", "--b"}},
		{Version: "v1.31.0", Env: map[string]string{}, Files: map[string][]byte{}},
	}
	for _, want := range cases {
		ud, err := EncodeUserData(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeUserData(ud)
		if err != nil {
			t.Fatal(err)
		}
		want.Machine = map[string]string{}
		if len(want.ExtraArgs) == 0 {
			got.ExtraArgs = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
	if _, err := EncodeUserData(providers.Template{Files: map[string][]byte{"big": make([]byte, 20<<10)}}); err == nil {
		t.Error("user data over 16 KB accepted")
	}
}
