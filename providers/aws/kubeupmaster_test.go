package aws_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"encoding/base64"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors/kubeup"
	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
)

// heredoc splits a kube-up AWS user data (gzip) into the script before the
// kube_env.yaml heredoc, its YAML and the script after, independently of
// the provider's parser.
func heredoc(t *testing.T, gz []byte) (before string, env map[string]string, after string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatalf("user data is not gzip: %v", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	const open, end = "cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML\n", "\n__EOF_MASTER_KUBE_ENV_YAML\n"
	i, j := strings.Index(s, open), strings.Index(s, end)
	if !strings.HasPrefix(s, "#! /bin/bash\n") || i < 0 || j < i {
		t.Fatalf("not kube-up's AWS master user data:\n%s", s)
	}
	env, err = kubeenv.Parse(s[i+len(open) : j+1])
	if err != nil {
		t.Fatal(err)
	}
	return s[:i+len(open)], env, s[j+1:]
}

// TestKubeUpAWSMaster: on a master 0 in kube-up's AWS format the provider
// follows kube-up's conventions (KubeUpProvider): members etcd-<EC2
// hostname> with peer URLs by hostname in both clusters, the masters' own
// CA, and a clone whose user data is the same gzip script with only the
// kube_env.yaml rewritten as replicate-master-instance does.
func TestKubeUpAWSMaster(t *testing.T) {
	t.Parallel()
	c := awstest.UpKubeUp(t, "kupaws", awstest.KubeUpOptions{})
	fx := c.KubeUp.Master.Metadata
	mhost := c.KubeUp.Master.Hostname
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	k, ok := c.Provider.(*awsp.KubeUpProvider)
	if !ok {
		t.Fatalf("provider on a kube-up AWS master is %T, want *aws.KubeUpProvider", c.Provider)
	}
	if got := providers.APIServerPortOf(k); got != 443 {
		t.Errorf("apiserver port on kube-up masters %d, want 443", got)
	}
	if got := kubeUpFlavor(t, k).EtcdClusters(); len(got) != 2 || got[0] != providers.EtcdMain || got[1] != providers.EtcdEvents {
		t.Errorf("EtcdClusters %v", got)
	}
	master, err := k.Instances().Get(ctx, c.Master)
	if err != nil {
		t.Fatal(err)
	}
	for cl, want := range map[string][2]string{
		providers.EtcdMain:   {"etcd-" + mhost, "https://" + mhost + ":2380"},
		providers.EtcdEvents: {"etcd-" + mhost, "https://" + mhost + ":2381"},
	} {
		if n, u := kubeUpFlavor(t, k).EtcdMember(cl, c.Master, master.Address); n != want[0] || u != want[1] {
			t.Errorf("EtcdMember(%s) = %s %s, want %s %s", cl, n, u, want[0], want[1])
		}
	}
	caPEM, err := kubeUpFlavor(t, k).MasterCA(ctx)
	if err != nil || !bytes.Equal(caPEM, fx.ClusterCA.CertPEM) {
		t.Errorf("ClusterCA: %v; want the CA_CERT of master 0's kube-env", err)
	}

	const name = "kupaws-master-b2d"
	addr, err := k.Instances().ReserveAddress(ctx, name, awstest.ZoneB)
	if err != nil {
		t.Fatal(err)
	}
	members := map[string][]etcdmember.Member{providers.EtcdMain: {{Name: "etcd-" + mhost}, {PeerURLs: []string{"https://new:2380"}}}}
	tmpl, err := kubeUpFlavor(t, k).CloneTemplate(ctx, master.Template, name, addr, members, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Instances().Create(ctx, name, awstest.ZoneB, tmpl); err != nil {
		t.Fatal(err)
	}
	raw := func(n string) []byte {
		out, err := c.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("tag:Name"), Values: []string{n}}, {Name: aws.String("instance-state-name"), Values: []string{"running"}}}})
		if err != nil || len(out.Reservations) != 1 {
			t.Fatalf("describe %s: %v", n, err)
		}
		a, err := c.EC2.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: out.Reservations[0].Instances[0].InstanceId, Attribute: ec2types.InstanceAttributeNameUserData})
		if err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(aws.ToString(a.UserData.Value))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mb, menv, ma := heredoc(t, raw(c.Master))
	cb, cenv, ca := heredoc(t, raw(name))
	if mb != cb || ma != ca {
		t.Errorf("the clone's script around kube_env.yaml differs from the master's")
	}
	if !strings.HasPrefix(addr, "172.20.1.") {
		t.Fatalf("reserved address %s in %s is not in its subnet %s", addr, awstest.ZoneB, awstest.KubeUpSubnetBCIDR)
	}
	host := awsp.Hostname(addr)
	t.Logf("clone %s: INITIAL_ETCD_CLUSTER=%q INITIAL_ETCD_CLUSTER_STATE=%q, %d kube-env keys (master %d), script around kube_env.yaml %d+%d bytes", name,
		cenv[kubeenv.InitialEtcdCluster], cenv[kubeenv.InitialEtcdClusterState], len(cenv), len(menv), len(cb), len(ca))
	for key, want := range map[string]string{
		kubeenv.InitialEtcdCluster:      mhost + "," + host,
		kubeenv.InitialEtcdClusterState: "existing",
		kubeup.EnvMasterEIP:             menv[kubeup.EnvMasterEIP],
		kubeup.EnvAPIServers:            menv[kubeup.EnvAPIServers],
	} {
		if cenv[key] != want {
			t.Errorf("clone %s = %q, want %q", key, cenv[key], want)
		}
	}
	changed := map[string]bool{kubeenv.InitialEtcdCluster: true, kubeenv.InitialEtcdClusterState: true, kubeenv.EtcdPeerCert: true, kubeenv.EtcdPeerKey: true,
		kubeenv.EtcdAPIServerServerCert: true, kubeenv.EtcdAPIServerServerKey: true, kubeenv.EtcdAPIServerClientCert: true, kubeenv.EtcdAPIServerClientKey: true}
	for key, v := range menv {
		if !changed[key] && cenv[key] != v {
			t.Errorf("clone %s changed: %.40q… → %.40q…", key, v, cenv[key])
		}
	}
	for key := range cenv {
		if _, ok := menv[key]; !ok && !changed[key] {
			t.Errorf("clone has %s, which the master has not", key)
		}
	}
	// The clone's own etcd peer certificate, for its hostname, from the
	// masters' etcd CA.
	certPEM, err := kubeenv.DecodeGzipBase64(kubeenv.EtcdPeerCert, cenv[kubeenv.EtcdPeerCert])
	if err != nil {
		t.Fatal(err)
	}
	crt, err := certs.ParseCertPEM(certPEM)
	if err != nil {
		t.Fatalf("ETCD_PEER_CERT: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(fx.EtcdPeerCA.Cert)
	if _, err := crt.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("the clone's etcd peer certificate (CN %s) does not verify for %s against the masters' etcd CA: %v", crt.Subject.CommonName, host, err)
	}
}
