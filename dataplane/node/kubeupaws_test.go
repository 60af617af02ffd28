package node

import (
	"bytes"
	"compress/gzip"
	"errors"
	"testing"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/kubeenv"
)

func TestKubeUpAWSUserData(t *testing.T) {
	script := "#! /bin/bash\nmkdir -p /var/cache/kubernetes-install\ncd /var/cache/kubernetes-install\n" +
		"cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML\nINITIAL_ETCD_CLUSTER: 'ip-10-0-1-9'\nETCD_APISERVER_CA_CERT: 'Y2E='\nMASTER_EIP: '198.18.0.5'\n__EOF_MASTER_KUBE_ENV_YAML\n\nwget -O bootstrap https://example.test/bootstrap\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(script))
	_ = zw.Close()
	for name, ud := range map[string][]byte{"plain": []byte(script), "gzip": gz.Bytes()} {
		env, crt, err := KubeUpAWSUserData(ud)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		e, _ := kubeenv.Parse(env)
		c, _ := kubeenv.Parse(crt)
		if e["INITIAL_ETCD_CLUSTER"] != "ip-10-0-1-9" || e["MASTER_EIP"] != "198.18.0.5" || len(e) != 2 {
			t.Errorf("%s: kube-env %v", name, e)
		}
		if c["ETCD_APISERVER_CA_CERT"] != "Y2E=" || len(c) != 1 {
			t.Errorf("%s: kube-master-certs %v", name, c)
		}
	}
	for _, bad := range []string{"", "Content-Type: multipart/mixed\n", "#! /bin/bash\necho hi\n", "#! /bin/bash\ncat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML\nA: 'b'\n"} {
		if _, _, err := KubeUpAWSUserData([]byte(bad)); !errors.Is(err, errkind.InvalidArgument) {
			t.Errorf("%q: err %v, want InvalidArgument", bad, err)
		}
	}
}
