package aws_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hamaster/hamaster/flavors/flavortest"
	"github.com/hamaster/hamaster/flavors/kubeup"
	"github.com/hamaster/hamaster/flavors/registry"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/providers/providertest"
	"github.com/hamaster/hamaster/testbed/aws/awstest"
	"github.com/hamaster/hamaster/testbed/local/localtest"
)

func TestMain(m *testing.M) {
	// Static test credentials and no instance metadata lookups: the SDK's
	// default chain must never leave loopback.
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "testing",
		"AWS_SECRET_ACCESS_KEY":       "testing",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	} {
		os.Setenv(k, v)
	}
	for _, k := range []string{"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_DEFAULT_PROFILE"} {
		os.Unsetenv(k)
	}
	os.Exit(localtest.Main(m))
}

// TestConformance runs the provider suite on a kube-up cluster in the
// namespace VPC: the extra replica is master 0's template replicated as
// kube-up's replicate-master-instance would, but forming etcd clusters of
// its own (INITIAL_ETCD_CLUSTER_STATE=new), so the suite can create,
// recreate and delete it without touching master 0's etcd.
func TestConformance(t *testing.T) {
	t.Parallel()
	c := awstest.UpKubeUp(t, "conf", awstest.KubeUpOptions{})
	k, ok := c.Provider.(*awsp.KubeUpProvider)
	if !ok {
		t.Fatalf("provider %T on a kube-up master", c.Provider)
	}
	t.Run("flavor kubeup", func(t *testing.T) {
		flavortest.Run(t, flavortest.Harness{Provider: c.Provider, Flavor: kubeUpFlavor(t, k), ReplicaName: c.Master + "-f1a"})
	})
	providertest.Run(t, providertest.Harness{
		Provider:    c.Provider,
		ReplicaName: c.Master + "-c0f",
		Template: func(t *testing.T, name, address string) providers.Template {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
			defer cancel()
			master, err := c.Provider.Instances().Get(ctx, c.Master)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := kubeUpFlavor(t, k).CloneTemplate(ctx, master.Template, name, address, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.Env[kubeenv.InitialEtcdClusterState] = kubeenv.StateNew
			return tmpl
		},
	})
	t.Logf("API calls of the conformance suite: %s", awstest.FormatCounts(c.Proxy.CountsSince(0)))
}

// kubeUpFlavor is the kubeup flavor on p: what hamaster makes of kube-up's
// AWS masters (flavors/kubeup), through the provider's way in.
func kubeUpFlavor(t testing.TB, p providers.Provider) *kubeup.Flavor {
	t.Helper()
	f, err := kubeup.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	registry.Attach(p, f)
	return f
}
