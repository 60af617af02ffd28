package node

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
)

// AWS kube-up master user data (kubernetes cluster/aws/util.sh up to
// v1.8, start-master): a `#! /bin/bash` script, gzip-compressed
// (cloud-init gunzips user data that starts with gzip's magic), whose
// first job is
//
//	cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML
//	<write-master-env's kube-env>
//	__EOF_MASTER_KUBE_ENV_YAML
//
// after which the bootstrap (cluster/aws/templates/configure-vm-aws.sh on
// top of cluster/gce/configure-vm.sh) reads /etc/kubernetes/kube_env.yaml.
// On AWS that one file also holds what GCE keeps in the kube-master-certs
// metadata item (ETCD_APISERVER_*).
const (
	awsHeredocStart = "cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML"
	awsHeredocEnd   = "__EOF_MASTER_KUBE_ENV_YAML"
)

// KubeUpAWSUserData does what a kube-up AWS master's boot does with its
// user data: gunzip it when it is gzip'ed, take the kube_env.yaml heredoc,
// and return it as GCE's two metadata items (kube-env, and the
// ETCD_APISERVER_* keys as kube-master-certs), so RunKubeUpMaster boots
// it. User data that is not that script is an errkind.InvalidArgument
// saying what was expected.
func KubeUpAWSUserData(b []byte) (kubeEnv, masterCerts string, err error) {
	bad := func(format string, args ...any) error {
		return errkind.Errorf(errkind.InvalidArgument, "user data: "+format+" (want kube-up's AWS master user data: a #! /bin/bash script, gzip'ed or not, writing kube_env.yaml from a heredoc ending "+awsHeredocEnd+")", args...)
	}
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return "", "", bad("gunzip: %v", err)
		}
		if b, err = io.ReadAll(io.LimitReader(zr, 1<<20)); err != nil {
			return "", "", bad("gunzip: %v", err)
		}
	}
	s := string(b)
	if first, _, _ := strings.Cut(s, "\n"); strings.TrimSpace(strings.ReplaceAll(first, "#! ", "#!")) != "#!/bin/bash" {
		return "", "", bad("starts with %.40q, not a bash script", first)
	}
	start := strings.Index(s, "\n"+awsHeredocStart+"\n")
	if start < 0 {
		return "", "", bad("no line %q", awsHeredocStart)
	}
	body := s[start+len(awsHeredocStart)+2:]
	end := strings.Index("\n"+body, "\n"+awsHeredocEnd+"\n")
	if end < 0 {
		return "", "", bad("the kube_env.yaml heredoc never ends")
	}
	env, err := kubeenv.Parse(body[:end])
	if err != nil {
		return "", "", bad("kube_env.yaml: %v", err)
	}
	crt := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "ETCD_APISERVER_") {
			crt[k] = v
			delete(env, k)
		}
	}
	return kubeenv.Render(env), kubeenv.Render(crt), nil
}
