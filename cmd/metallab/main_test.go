package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"--help"}, 0, "usage: metallab --hosts N --state DIR"},
		{"help names kubeadm", []string{"--help"}, 0, "--kubeadm-master VERSION"},
		{"missing", []string{"--state", "x"}, 2, "--hosts and --state are required"},
		{"too many hosts", []string{"--state", "x", "--hosts", "33"}, 2, "--hosts 33: want 1..32"},
		{"kubeadm version", []string{"--state", "x", "--hosts", "2", "--kubeadm-master", "1.33"}, 2, "--kubeadm-master \"1.33\""},
		{"kubeadm binaries", []string{"--state", "x", "--hosts", "2", "--kubeadm-master", "v1.33.13", "--kubelet", "/nonexistent"}, 2, "--kubelet"},
		{"kubelet without kubeadm", []string{"--state", "x", "--hosts", "2", "--bin-dir", "/x"}, 2, "go with --kubeadm-master"},
		{"subnet elsewhere", []string{"--state", "x", "--hosts", "2", "--subnet", "10.0.0.0/24"}, 2, "want 198.18.T.0/24"},
		{"subnet size", []string{"--state", "x", "--hosts", "2", "--subnet", "198.18.4.0/23"}, 2, "want 198.18.T.0/24"},
		{"subnet zero", []string{"--state", "x", "--hosts", "2", "--subnet", "198.18.0.0/24"}, 2, "T 1..99"},
		{"subnet of the fakes", []string{"--state", "x", "--hosts", "2", "--subnet", "198.18.100.0/24"}, 2, "T 1..99"},
		{"cleanup with others", []string{"--cleanup", "x", "--hosts", "2"}, 2, "--cleanup DIR takes no other lab flags"},
		{"extra", []string{"--state", "x", "--hosts", "2", "extra"}, 2, "unexpected arguments"},
		{"log level", []string{"--state", "x", "--hosts", "2", "--log-level", "loud"}, 2, "--log-level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, errb.String())
			}
		})
	}
}
