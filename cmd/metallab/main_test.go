package main

import (
	"testing"

	"github.com/hamaster/hamaster/testbed/labcmd/labcmdtest"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	labcmdtest.Usage(t, run, []labcmdtest.UsageCase{
		{Name: "help", Args: []string{"--help"}, Code: 0, Want: "usage: metallab --hosts N --state DIR"},
		{Name: "help names kubeadm", Args: []string{"--help"}, Code: 0, Want: "--kubeadm-master VERSION"},
		{Name: "missing", Args: []string{"--state", "x"}, Code: 2, Want: "--hosts and --state are required"},
		{Name: "too many hosts", Args: []string{"--state", "x", "--hosts", "33"}, Code: 2, Want: "--hosts 33: want 1..32"},
		{Name: "kubeadm version", Args: []string{"--state", "x", "--hosts", "2", "--kubeadm-master", "1.33"}, Code: 2, Want: "--kubeadm-master \"1.33\""},
		{Name: "kubeadm binaries", Args: []string{"--state", "x", "--hosts", "2", "--kubeadm-master", "v1.33.13", "--kubelet", "/nonexistent"}, Code: 2, Want: "--kubelet"},
		{Name: "kubelet without kubeadm", Args: []string{"--state", "x", "--hosts", "2", "--bin-dir", "/x"}, Code: 2, Want: "go with --kubeadm-master"},
		{Name: "every host a worker", Args: []string{"--state", "x", "--hosts", "2", "--workers", "2"}, Code: 2, Want: "--workers 2: want 0..1"},
		{Name: "help names workers", Args: []string{"--help"}, Code: 0, Want: "--workers N"},
		{Name: "subnet elsewhere", Args: []string{"--state", "x", "--hosts", "2", "--subnet", "10.0.0.0/24"}, Code: 2, Want: "want 198.18.T.0/24"},
		{Name: "subnet size", Args: []string{"--state", "x", "--hosts", "2", "--subnet", "198.18.4.0/23"}, Code: 2, Want: "want 198.18.T.0/24"},
		{Name: "subnet zero", Args: []string{"--state", "x", "--hosts", "2", "--subnet", "198.18.0.0/24"}, Code: 2, Want: "T 1..99"},
		{Name: "subnet of the fakes", Args: []string{"--state", "x", "--hosts", "2", "--subnet", "198.18.100.0/24"}, Code: 2, Want: "T 1..99"},
		{Name: "cleanup with others", Args: []string{"--cleanup", "x", "--hosts", "2"}, Code: 2, Want: "--cleanup DIR takes no other lab flags"},
		{Name: "extra", Args: []string{"--state", "x", "--hosts", "2", "extra"}, Code: 2, Want: "unexpected arguments"},
		{Name: "log level", Args: []string{"--state", "x", "--hosts", "2", "--log-level", "loud"}, Code: 2, Want: "--log-level"},
	})
}
