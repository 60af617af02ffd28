package iproute

import (
	"os/exec"
	"strings"
	"testing"
)

func TestRunAndRunTolerant(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2's ip is a prerequisite of the test beds: %v", err)
	}
	ctx := t.Context()
	if err := Run(ctx, "test", "-V"); err != nil {
		t.Errorf("ip -V: %v", err)
	}
	// Deleting a device that does not exist changes nothing.
	del := []string{"link", "del", "hamaster-none0"}
	err := Run(ctx, "test", del...)
	if err == nil || !strings.HasPrefix(err.Error(), "test: ip link del hamaster-none0: ") || !strings.Contains(err.Error(), "Cannot find device") {
		t.Errorf("Run(del missing) = %v", err)
	}
	if err := RunTolerant(ctx, "test", []string{"Cannot find device"}, del...); err != nil {
		t.Errorf("RunTolerant(del missing, gone) = %v, want nil", err)
	}
	if err := RunTolerant(ctx, "test", []string{"No such process"}, del...); err == nil {
		t.Error("RunTolerant(del missing, other words) = nil, want the error")
	}
}
