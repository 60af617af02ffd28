package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCLIDoesNotLinkTheEtcdServer: only hamaster-node embeds etcd; the
// CLI reaches its launchers' contract through dataplane/nodeapi.
func TestCLIDoesNotLinkTheEtcdServer(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/hamaster/hamaster/cmd/hamaster").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "go.etcd.io/etcd/server/") || pkg == "github.com/hamaster/hamaster/dataplane/node" {
			t.Errorf("the CLI links %s (the etcd server belongs to hamaster-node only)", pkg)
		}
	}
}
