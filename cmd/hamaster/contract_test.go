package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/flavors/hamaster"
	"github.com/hamaster/hamaster/flavors/kubeadm"
	"github.com/hamaster/hamaster/flavors/kubeup"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/providers/aws"
	"github.com/hamaster/hamaster/providers/gce"
	"github.com/hamaster/hamaster/providers/local"
	"github.com/hamaster/hamaster/providers/metal"
)

// TestContractTables checks docs/contract.md's two tables against the
// code: each row's yes and — per implementation must be what the type
// implements. A capability added to the code but not to the table, or
// a table row naming one the code does not have, fails too.
func TestContractTables(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	ifaces := map[string]reflect.Type{}
	for _, p := range []any{
		(*providers.Provider)(nil), (*providers.MachineDialer)(nil), (*providers.MasterFormatter)(nil), (*providers.Formatted)(nil),
		(*providers.ReleaseSource)(nil), (*providers.APIServerPorter)(nil), (*providers.EndpointPorter)(nil), (*providers.APIServerDialer)(nil),
		(*providers.NameChooser)(nil), (*providers.MasterNamer)(nil), (*providers.ControlPlaneReporter)(nil), (*providers.WorkerLister)(nil),
		(*providers.Adopter)(nil),
		(*flavors.Flavor)(nil), (*flavors.Joiner)(nil), (*flavors.NodeDrainer)(nil), (*flavors.EndpointMover)(nil), (*flavors.PinFinder)(nil),
		(*flavors.Upgrader)(nil), (*flavors.FlagUpgrader)(nil), (*flavors.CertRenewer)(nil), (*flavors.ClientIssuer)(nil),
		(*flavors.ReplicaCertIssuer)(nil), (*flavors.Viewer)(nil), (*flavors.APIServerStopper)(nil), (*flavors.Recoverer)(nil),
	} {
		it := reflect.TypeOf(p).Elem()
		ifaces[it.String()] = it
	}
	impls := map[string]reflect.Type{
		"local": reflect.TypeFor[*local.Provider](), "gce": reflect.TypeFor[*gce.Provider](), "aws": reflect.TypeFor[*aws.Provider](),
		"aws kube-up": reflect.TypeFor[*aws.KubeUpProvider](), "metal": reflect.TypeFor[*metal.Provider](),
		"hamaster": reflect.TypeFor[*hamaster.Flavor](), "kubeup": reflect.TypeFor[*kubeup.Flavor](), "kubeadm": reflect.TypeFor[*kubeadm.Flavor](),
	}
	seen := map[string]bool{}
	var header []string
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "|") {
			header = nil
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if header == nil {
			header = cells
			continue
		}
		name, _, _ := strings.Cut(strings.Trim(cells[0], "`"), "`")
		if strings.HasPrefix(name, "---") || strings.Contains(cells[0], "(Instances)") || strings.Contains(cells[0], "(LoadBalancer)") {
			continue // the separator; capabilities of Instances() or LoadBalancer(), not the type
		}
		it, ok := ifaces[name]
		if !ok {
			t.Errorf("docs/contract.md: row %q names no capability the test knows", name)
			continue
		}
		seen[name] = true
		for i := 3; i < len(cells) && i < len(header); i++ {
			impl, ok := impls[header[i]]
			if !ok {
				t.Fatalf("docs/contract.md: column %q names no implementation the test knows", header[i])
			}
			has := impl.Implements(it)
			if says := cells[i] == "yes"; says != has {
				t.Errorf("docs/contract.md: %s, %s says %q; the code: implemented = %v", name, header[i], cells[i], has)
			}
		}
	}
	for name := range ifaces {
		if !seen[name] {
			t.Errorf("docs/contract.md has no row for %s", name)
		}
	}
}
