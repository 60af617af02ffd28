package aws_test

import (
	"context"
	"encoding/base64"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/workflows"
)

// TestKubeUpVPCMaster0: master 0 made as kube-up's start-master makes it
// boots in the namespace VPC from its gzip'ed user data; the operator's
// namespace reaches its Elastic IP (https on 443) and the bastion, never
// its private address; its console output is the boot's; the provider
// reads etcd through SSH via the bastion, members named by the EC2
// hostname.
func TestKubeUpVPCMaster0(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := awstest.UpKubeUp(t, "kupvpc", awstest.KubeUpOptions{})
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	k := c.KubeUp
	if ok, route := k.Net.Routed(netip.MustParseAddr(k.Master.InternalIP)); ok {
		t.Errorf("the operator's namespace routes master 0's private address %s: %s", k.Master.InternalIP, route)
	}
	if ok, route := k.Net.Routed(netip.MustParseAddr(k.Master.EIP)); !ok {
		t.Errorf("the Elastic IP %s is not routed from the operator's namespace: %s", k.Master.EIP, route)
	}
	viaProxy := ec2.New(ec2.Options{Region: awstest.Region, BaseEndpoint: aws.String(c.Proxy.URL), Credentials: c.EC2.Options().Credentials})
	out, err := viaProxy.GetConsoleOutput(ctx, &ec2.GetConsoleOutputInput{InstanceId: aws.String(k.Master.ID)})
	if err != nil {
		t.Fatal(err)
	}
	console, _ := base64.StdEncoding.DecodeString(aws.ToString(out.Output))
	if !strings.Contains(string(console), "kube-up master configured") || !strings.Contains(string(console), k.Master.Hostname) {
		t.Errorf("console output is not master 0's boot:\n%s", console)
	}
	kp, ok := c.Provider.(*awsp.KubeUpProvider)
	if !ok {
		t.Fatalf("provider is %T, want *aws.KubeUpProvider", c.Provider)
	}
	for _, cl := range kubeUpFlavor(t, kp).EtcdClusters() {
		cli, err := kubeUpFlavor(t, kp).EtcdCluster(ctx, cl)
		if err != nil {
			t.Fatalf("etcd %s through the bastion: %v", cl, err)
		}
		ms, err := cli.Members(ctx)
		cli.Close()
		if err != nil {
			t.Fatal(err)
		}
		// etcd.manifest: --name etcd-<hostname> in both clusters.
		want := "etcd-" + k.Master.Hostname
		if len(ms) != 1 || ms[0].Name != want {
			t.Errorf("etcd %s members %+v, want %s", cl, ms, want)
		}
	}
}

// newKubeUpEnv brings a kube-up cluster up on the namespace VPC.
func newKubeUpEnv(t *testing.T, name string, o awstest.KubeUpOptions) *env {
	c := awstest.UpKubeUp(t, name, o)
	return envOn(t, c, c.EndpointMode == "dns")
}

// TestAdoptKubeUpTags: master 0 with kube-up's tags only (Name,
// KubernetesCluster, Role on the instance; Name, KubernetesCluster and
// kubernetes.io/master-ip on its volume; an untagged Elastic IP): opening
// the provider, status and a dry run of add-replica tag nothing; the
// first add-replica's adopt step tags it, its volume and its Elastic IP
// as the provider's own, adopting again changes nothing, and the cluster
// grows from it.
func TestAdoptKubeUpTags(t *testing.T) {
	t.Parallel()
	e := newKubeUpEnv(t, "adopt", awstest.KubeUpOptions{NoHamasterTags: true})
	c := e.c
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	k := c.KubeUp.Master
	tags := func() map[string]map[string]string {
		out, err := c.EC2.DescribeTags(ctx, &ec2.DescribeTagsInput{Filters: []ec2types.Filter{{Name: aws.String("resource-id"), Values: []string{k.ID, k.VolumeID, k.AllocationID}}}})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]map[string]string{}
		for _, tg := range out.Tags {
			id := aws.ToString(tg.ResourceId)
			if m[id] == nil {
				m[id] = map[string]string{}
			}
			m[id][aws.ToString(tg.Key)] = aws.ToString(tg.Value)
		}
		return m
	}
	untagged := func(when string) map[string]map[string]string {
		t.Helper()
		got := tags()
		for _, id := range []string{k.ID, k.VolumeID, k.AllocationID} {
			if v, ok := got[id][awsp.TagCluster]; ok {
				t.Fatalf("%s: %s tagged %s=%q (tags %v)", when, id, awsp.TagCluster, v, got[id])
			}
		}
		return got
	}
	before := untagged("opening the provider")
	// Read-only commands and a dry run tag nothing.
	// Status says why it finds no master yet, and what adopts it.
	if _, err := workflows.Status(ctx, e.deps(nil)); err == nil || !strings.Contains(err.Error(), "not adopted yet") || !strings.Contains(err.Error(), k.ID) {
		t.Errorf("status before adoption: %v; want an error naming kube-up's master 0 %s as not adopted yet", err, k.ID)
	}
	untagged("status")
	d := e.deps(nil)
	var plan strings.Builder
	d.Out = &plan
	if err := workflows.Execute(ctx, d, workflows.AddReplica(d, workflows.AddParams{Name: "adopt-master-a01"}), workflows.Options{DryRun: true}); err != nil {
		t.Fatalf("dry run of add-replica: %v", err)
	}
	if again := untagged("a dry run of add-replica"); !maps.EqualFunc(again, before, maps.Equal) {
		t.Errorf("status or a dry run changed tags: %v → %v", before, again)
	}
	if err := e.add(ctx, "adopt-master-a01", nil); err != nil {
		t.Fatalf("add from the adopted master: %v", err)
	}
	got := tags()
	for id, want := range map[string]map[string]string{
		k.ID:           {awsp.TagCluster: c.Name},
		k.VolumeID:     {awsp.TagCluster: c.Name, awsp.TagReplica: c.Master, awsp.TagRole: "data"},
		k.AllocationID: {awsp.TagCluster: c.Name},
	} {
		for key, v := range want {
			if got[id][key] != v {
				t.Errorf("%s: tag %s=%q after adoption, want %q (tags %v)", id, key, got[id][key], v, got[id])
			}
		}
	}
	if got[k.ID][awsp.TagKubernetesCluster] != c.Name || got[k.ID][awsp.TagKubeUpRole] != c.Master {
		t.Errorf("kube-up's own tags changed: %v", got[k.ID])
	}
	// Adopting again adopts nothing new and changes nothing.
	a := providers.CapabilitiesOf(c.Provider).Adopter
	if a == nil {
		t.Fatal("kube-up's AWS provider has no Adopter")
	}
	if err := a.Adopt(ctx); err != nil {
		t.Fatalf("adopt again: %v", err)
	}
	if again := tags(); !maps.EqualFunc(again, got, maps.Equal) {
		t.Errorf("a second adoption changed tags: %v → %v", got, again)
	}
	e.assertConverged(ctx, c.Master, "adopt-master-a01")
}
