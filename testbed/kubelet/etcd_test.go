package kubelet

import (
	"reflect"
	"testing"
)

func TestEtcdArgs(t *testing.T) {
	tests := []struct {
		name     string
		in, want []string
	}{
		{name: "etcd 3.5 flags (kubeadm 1.33)",
			in:   []string{"--name=a", "--experimental-initial-corrupt-check=true", "--experimental-watch-progress-notify-interval=5s", "--data-dir=/var/lib/etcd"},
			want: []string{"--name=a", "--feature-gates=InitialCorruptCheck=true", "--watch-progress-notify-interval=5s", "--data-dir=/var/lib/etcd"}},
		{name: "etcd 3.6 flags (kubeadm 1.34) unchanged",
			in:   []string{"--feature-gates=InitialCorruptCheck=true", "--watch-progress-notify-interval=5s"},
			want: []string{"--feature-gates=InitialCorruptCheck=true", "--watch-progress-notify-interval=5s"}},
		{name: "corrupt check off dropped", in: []string{"--experimental-initial-corrupt-check=false"}, want: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := EtcdArgs(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("EtcdArgs(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
