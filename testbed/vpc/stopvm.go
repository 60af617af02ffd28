package vpc

import (
	"github.com/hamaster/hamaster/dataplane/vm"
	"github.com/hamaster/hamaster/internal/proctree"
)

// StopProcesses stops what a fake's VM runs: its node, then its sshd and
// the sessions sshd forked (tunnels an operator still holds), so that
// nothing outlives the VM. sshd may be nil.
func StopProcesses(node, sshd *vm.Process) {
	node.Stop()
	if sshd != nil {
		if sshd.Running() {
			proctree.KillTree(sshd.Pid())
		}
		sshd.Stop() // reaps it
	}
}
