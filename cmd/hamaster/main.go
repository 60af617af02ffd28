// Command hamaster makes a Kubernetes control plane highly available and
// keeps it that way: it adds and removes master replicas (etcd member,
// VM, load balancer, DNS, certificates) safely, resumably and one at a time.
package main

import (
	"context"
	"os"

	"github.com/hamaster/hamaster/internal/climain"
)

func main() {
	climain.Run(func(ctx context.Context) int {
		return run(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr, os.Environ())
	})
}
