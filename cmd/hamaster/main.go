// Command hamaster makes a Kubernetes control plane highly available and
// keeps it that way: it adds and removes master replicas (etcd member,
// VM, load balancer, DNS, certificates) safely, resumably and one at a time.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr, os.Environ())
	stop()
	os.Exit(code)
}
