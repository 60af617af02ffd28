// Package iproute runs iproute2's ip for the test beds that build
// networks of namespaces (testbed/vpc, testbed/metal/metallab).
package iproute

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Run runs ip with args. Its error is prefixed with who (the caller's
// name, "vpc") and names the arguments and what ip printed.
func Run(ctx context.Context, who string, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: ip %s: %v: %s", who, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RunTolerant is Run for deletions: an error whose text holds one of
// gone (ip's words for "already gone", such as "Cannot find device") is
// success.
func RunTolerant(ctx context.Context, who string, gone []string, args ...string) error {
	err := Run(ctx, who, args...)
	if err != nil && slices.ContainsFunc(gone, func(g string) bool { return strings.Contains(err.Error(), g) }) {
		return nil
	}
	return err
}
