package aws_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/flavors/registry"
	"github.com/hamaster/hamaster/providers"
	awsp "github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/workflows"
)

// TestDryRunStatesTheHandoverOutage: add-replica's plan (what --dry-run
// prints) says what the Elastic IP handover costs on AWS.
func TestDryRunStatesTheHandoverOutage(t *testing.T) {
	t.Parallel()
	p, err := awsp.New(context.Background(), providers.Settings{Cluster: "plan", StateDir: t.TempDir(),
		Options: map[string]string{awsp.OptRegion: "us-east-1", awsp.OptEndpoint: "http://127.0.0.1:1"}, Flavor: "hamaster"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	f, err := registry.Open("", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &workflows.Deps{Provider: p, Master: f, Cluster: "plan", StateDir: t.TempDir()}
	doc := workflows.AddReplica(d, workflows.AddParams{Name: "plan-master-a01"}).Doc("plan", awsp.Name, nil, false)
	for _, s := range doc.Steps {
		if s.Name != workflows.StepPromoteLB {
			continue
		}
		for _, c := range s.Calls {
			if strings.HasPrefix(c, "outage: ") && strings.Contains(c, "answering nowhere") && strings.Contains(c, "minutes") {
				return
			}
		}
		t.Fatalf("promotion plan %q does not state the Elastic IP handover's outage", s.Calls)
	}
	t.Fatalf("no %s step in %+v", workflows.StepPromoteLB, doc.Steps)
}
