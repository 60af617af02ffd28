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
		{"help", []string{"--help"}, 0, "usage: gcefake"},
		{"missing", []string{"--state", "x"}, 2, "--state and --kube-up-master (or --kubeadm-master) are required"},
		{"both", []string{"--state", "x", "--kube-up-master", "k-master", "--kubeadm-master", "k-master"}, 2, "are required"},
		{"not a master name", []string{"--state", "x", "--kubeadm-master", "etcd1"}, 2, "<cluster>-master"},
		{"bad kubeadm version", []string{"--state", "x", "--kubeadm-master", "k-master", "--kubeadm-version", "1.33"}, 2, "--kubeadm-version"},
		{"not a kube-up name", []string{"--state", "x", "--kube-up-master", "etcd1"}, 2, "INSTANCE_PREFIX-master"},
		{"bad zone", []string{"--state", "x", "--kube-up-master", "k-master", "--zone", "zone"}, 2, "--zone"},
		{"extra", []string{"--state", "x", "--kube-up-master", "k-master", "extra"}, 2, "unexpected arguments"},
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
