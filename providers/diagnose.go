package providers

import "context"

// Diagnosis is what a provider can tell about a replica that is not
// healthy, beyond what its endpoints answer.
type Diagnosis struct {
	// Failed is true when the replica has failed in a way that waiting
	// will not fix: its process or VM exited, or a component refused to
	// start (a bad flag), or it is restarting in a loop.
	Failed bool
	// Cause names the failure for the operator: how the process ended and
	// the last error its log shows.
	Cause string
}

// ReplicaDiagnoser is an optional capability of a provider's Instances:
// it looks at the replica itself (the VM or process and its log) so a
// health gate can fail fast on a deterministic start-up failure instead
// of waiting out its timeout. Providers that cannot see inside their VMs
// do not implement it; CapabilitiesOf resolves it
// (Capabilities.ReplicaDiagnoser) and Diagnose asks it.
type ReplicaDiagnoser interface {
	// Diagnose returns the replica's state as seen from its process;
	// Failed false means nothing known to be wrong (maybe still starting).
	// A replica that does not exist is errkind.NotFound.
	Diagnose(ctx context.Context, name string) (Diagnosis, error)
}
