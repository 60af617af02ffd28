package aws_test

import (
	"context"
	"os"
	"testing"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/aws/awstest"
	"github.com/hamaster/hamaster/providers/providertest"
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
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	t.Parallel()
	c := awstest.Up(t, "conf", awstest.Options{})
	master, err := c.Provider.Instances().Get(context.Background(), c.Master)
	if err != nil {
		t.Fatal(err)
	}
	providertest.Run(t, providertest.Harness{
		Provider: c.Provider,
		Template: func(t *testing.T, name, address string) providers.Template {
			files, err := providers.ReplicaFiles(c.CA, name, address, certs.APIServerSANs{StaticIP: c.StaticIP})
			if err != nil {
				t.Fatal(err)
			}
			tmpl := master.Template.Clone()
			tmpl.Files = files
			tmpl.Env[providers.EnvInitialEtcdCluster] = name + "=" + providers.PeerURL(address)
			tmpl.Env[providers.EnvEtcdInitialClusterState] = "new"
			return tmpl
		},
	})
	t.Logf("API calls of the conformance suite: %s", awstest.FormatCounts(c.Proxy.CountsSince(0)))
}
