package flavors

// Capabilities are a flavor's optional interfaces, resolved once by
// CapabilitiesOf when the flavor is bound (workflows.Deps): a field is
// the flavor as that interface, nil when it has not got it. The
// workflows and the CLI check a field; none asserts a type.
// docs/contract.md tables which flavor has which.
type Capabilities struct {
	// Membership: how a master joins and leaves, and what is done to
	// it around that.

	// Joiner joins and leaves masters with the flavor's own tool.
	Joiner Joiner
	// NodeDrainer drains a master's Node before it is touched.
	NodeDrainer NodeDrainer
	// APIServerStopper stops a leaving master's apiserver before its
	// etcd member is removed. Resolved on the flavor, as Joiner is: a
	// workflow uses it only when Joiner is set too.
	APIServerStopper APIServerStopper

	// Endpoint: what the masters record of the cluster's endpoint.

	// EndpointMover moves the endpoint the masters record.
	EndpointMover EndpointMover
	// PinFinder finds consumers left on one master's own address.
	PinFinder PinFinder

	// Upgrade and certificates: the flavor's own tool changes a master
	// in place.

	// Upgrader upgrades masters in place.
	Upgrader Upgrader
	// FlagUpgrader changes the apiserver's flags in an in-place upgrade
	// (FlagUpgraderOf resolves it on an Upgrader derived from the
	// flavor).
	FlagUpgrader FlagUpgrader
	// ReplicaCertIssuer issues the masters' certificates from the
	// cluster CA in the state directory (nil: the masters carry their
	// own, MasterCA).
	ReplicaCertIssuer ReplicaCertIssuer
	// CertRenewer renews the masters' certificates.
	CertRenewer CertRenewer
	// ClientIssuer issues a person's client certificate on a master.
	ClientIssuer ClientIssuer

	// Status and recovery.

	// Viewer is the flavor's own view of the masters.
	Viewer Viewer
	// Recoverer rebuilds a master's etcd with the flavor's own files.
	Recoverer Recoverer
}

// CapabilitiesOf resolves f's optional interfaces: the one place a
// flavor's type is asserted.
func CapabilitiesOf(f Flavor) Capabilities {
	var c Capabilities
	if f == nil {
		return c
	}
	c.Joiner, _ = f.(Joiner)
	c.NodeDrainer, _ = f.(NodeDrainer)
	c.APIServerStopper, _ = f.(APIServerStopper)
	c.EndpointMover, _ = f.(EndpointMover)
	c.PinFinder, _ = f.(PinFinder)
	c.Upgrader, _ = f.(Upgrader)
	c.FlagUpgrader, _ = f.(FlagUpgrader)
	c.ReplicaCertIssuer, _ = f.(ReplicaCertIssuer)
	c.CertRenewer, _ = f.(CertRenewer)
	c.ClientIssuer, _ = f.(ClientIssuer)
	c.Viewer, _ = f.(Viewer)
	c.Recoverer, _ = f.(Recoverer)
	return c
}

// FlagUpgraderOf is up as a FlagUpgrader, nil when it cannot change the
// apiserver's flags: the capability of an Upgrader that is not the
// flavor itself (one FlagUpgrader.WithAPIServerArgs returned).
func FlagUpgraderOf(up Upgrader) FlagUpgrader {
	fu, _ := up.(FlagUpgrader)
	return fu
}
