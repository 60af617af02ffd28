//go:build fidelity

// Run by .ci/run's cloud-upgrade tier after 'make test', which stays under
// 10 minutes on 2 cores: the upgrade waits on each recreated instance's
// boot and the NLB's health checks (~140 s).

package aws_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hamaster/hamaster/kubeenv"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/workflows"
)

// TestRollingUpgrade upgrades a 3-replica cluster one instance at a time
// (recreate strategy): every instance is replaced, every data volume is
// kept (same volume IDs), and the cluster converges at the new version.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "upg", awstest.KubeUpOptions{})
	c := e.c
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := []string{"upg-master-b01", "upg-master-b02"}
	for _, n := range names {
		if err := e.add(ctx, n, nil); err != nil {
			t.Fatalf("add %s: %v", n, err)
		}
	}
	volumes := func() (map[string]string, map[string]string) {
		vols, err := c.EC2.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{{Name: aws.String("tag:" + awsp.TagRole), Values: []string{"data"}}}})
		if err != nil {
			t.Fatal(err)
		}
		vol, inst := map[string]string{}, map[string]string{}
		for _, v := range vols.Volumes {
			for _, tg := range v.Tags {
				if aws.ToString(tg.Key) == awsp.TagReplica {
					vol[aws.ToString(tg.Value)] = aws.ToString(v.VolumeId)
					if len(v.Attachments) > 0 {
						inst[aws.ToString(tg.Value)] = aws.ToString(v.Attachments[0].InstanceId)
					}
				}
			}
		}
		return vol, inst
	}
	volBefore, instBefore := volumes()
	mark := c.Proxy.Mark()
	start := time.Now()
	d := e.deps(nil)
	p := workflows.UpgradeParams{Version: "v1.31.0", Strategy: workflows.StrategyRecreate, HealthTimeout: time.Minute}
	if err := workflows.Execute(ctx, d, workflows.RollingUpgrade(d, p, 3), workflows.Options{}); err != nil {
		t.Fatalf("rolling upgrade: %v", err)
	}
	t.Logf("rolling upgrade of 3: %s, API calls %s", time.Since(start).Round(time.Millisecond), awstest.FormatCounts(c.Proxy.CountsSince(mark)))
	e.assertConverged(ctx, c.Master, names[0], names[1])
	volAfter, instAfter := volumes()
	rs, err := c.Provider.Instances().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Template.Version != "v1.31.0" {
			t.Errorf("%s runs %s after the upgrade", r.Name, r.Template.Version)
		}
		// Written as kube-up's upgrade writes it: the release tarball
		// (tars_from_version), never KUBE_VERSION.
		if want, _ := kubeenv.ReleaseURLs(c.KubeUp.Releases.URL(), "v1.31.0"); r.Template.Env[kubeenv.ServerBinaryTarURL] != want || r.Template.Env[kubeenv.KubeVersion] != "" {
			t.Errorf("%s: kube-env %s=%q %s=%q; want %s and no %s", r.Name, kubeenv.ServerBinaryTarURL, r.Template.Env[kubeenv.ServerBinaryTarURL],
				kubeenv.KubeVersion, r.Template.Env[kubeenv.KubeVersion], want, kubeenv.KubeVersion)
		}
		if volAfter[r.Name] != volBefore[r.Name] {
			t.Errorf("%s: data volume %s replaced by %s", r.Name, volBefore[r.Name], volAfter[r.Name])
		}
		if instAfter[r.Name] == instBefore[r.Name] {
			t.Errorf("%s: instance %s not replaced", r.Name, instBefore[r.Name])
		}
		if st, ok := c.VMs.NodeStatus(r.Name); !ok || st.Version != "v1.31.0" {
			t.Errorf("%s node reports %+v", r.Name, st)
		}
	}
}
