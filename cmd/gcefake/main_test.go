package main

import (
	"testing"

	"github.com/hamaster/hamaster/testbed/labcmd/labcmdtest"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	labcmdtest.Usage(t, run, []labcmdtest.UsageCase{
		{Name: "help", Args: []string{"--help"}, Code: 0, Want: "usage: gcefake"},
		{Name: "missing", Args: []string{"--state", "x"}, Code: 2, Want: "--state and --kube-up-master (or --kubeadm-master) are required"},
		{Name: "both", Args: []string{"--state", "x", "--kube-up-master", "k-master", "--kubeadm-master", "k-master"}, Code: 2, Want: "are required"},
		{Name: "not a master name", Args: []string{"--state", "x", "--kubeadm-master", "etcd1"}, Code: 2, Want: "<cluster>-master"},
		{Name: "bad kubeadm version", Args: []string{"--state", "x", "--kubeadm-master", "k-master", "--kubeadm-version", "1.33"}, Code: 2, Want: "--kubeadm-version"},
		{Name: "not a kube-up name", Args: []string{"--state", "x", "--kube-up-master", "etcd1"}, Code: 2, Want: "INSTANCE_PREFIX-master"},
		{Name: "bad zone", Args: []string{"--state", "x", "--kube-up-master", "k-master", "--zone", "zone"}, Code: 2, Want: "--zone"},
		{Name: "extra", Args: []string{"--state", "x", "--kube-up-master", "k-master", "extra"}, Code: 2, Want: "unexpected arguments"},
	})
}
