package providers

import (
	"context"
	"net"
	"os"
	"slices"

	"github.com/hamaster/hamaster/etcdmember"
)

// Names of the etcd clusters a master may run. Every master runs
// EtcdMain; kube-up's also run EtcdEvents (cluster/gce/gci/
// configure-helper.sh start-etcd-servers: etcd on 2379/2380 and
// etcd-events on 4002/2381), whose members are added and removed with
// the main cluster's. Which clusters a master runs is its flavor's
// (package flavors); the names are here because journals and the state
// directory keep them.
const (
	EtcdMain   = "main"
	EtcdEvents = "events"
)

// EtcdReacher is implemented by providers that reach the etcd of masters
// in hamaster's own format (client port on each replica's address, mutual
// TLS with the operator's certificate from the cluster CA in PKIDir):
// directly (local) or through SSH (AWS). flavors/hamaster needs it.
type EtcdReacher interface {
	// Etcd connects to the cluster's etcd through replicas other than
	// those named in exclude (never through a victim).
	Etcd(ctx context.Context, exclude ...string) (*etcdmember.Client, error)
}

// MachineDialer is a provider's way into its machines, for flavors whose
// masters serve what hamaster needs on the machine's own loopback only
// (kube-up's etcd: configure-helper.sh prepare-etcd-manifest
// --listen-client-urls http(s)://127.0.0.1:<port>): an SSH connection to
// the machine (to its external address, or through a bastion), and a
// tunnel from there.
type MachineDialer interface {
	// DialMachine opens a TCP connection to addr as machine (a replica's
	// name) itself sees it ("127.0.0.1:2379": the machine's own
	// loopback). A failed dial forgets the connection it went through.
	DialMachine(ctx context.Context, machine, addr string) (net.Conn, error)
	// MachineHostname is the hostname the machines' network resolves
	// for replica (at address, "" when not known: the provider's last
	// description of it), "" when the provider cannot tell: a GCE
	// instance's name, EC2's ip-a-b-c-d.
	MachineHostname(replica, address string) string
}

// MachineRunner is implemented by providers whose way into a machine
// runs commands there (SSH), for flavors whose masters are changed by
// their own tool on the machine (kubeadm join, reset, upgrade node), as
// the operator would run it.
type MachineRunner interface {
	// RunOnMachine runs cmd, a POSIX sh command line, on machine (a
	// replica's name) and returns its stdout and stderr; a non-zero exit
	// is an error carrying the tail of stderr (remote.ExitError).
	RunOnMachine(ctx context.Context, machine, cmd string) (stdout, stderr []byte, err error)
}

// MachineUploader is implemented by providers whose way into a machine
// writes files there itself (metal: over an SSH session's stdin), where a
// flavor would otherwise carry a file in pieces through RunOnMachine.
type MachineUploader interface {
	// UploadToMachine writes data to path on machine (a replica's name)
	// with mode, atomically: a reader sees the old file or the whole new
	// one.
	UploadToMachine(ctx context.Context, machine, path string, data []byte, mode os.FileMode) error
}

type readOnlyKey struct{}

// ReadOnly marks the commands run on a machine with the returned context
// as changing nothing there (a file read, a kubectl get): a provider that
// keeps what it last probed on a machine (metal, whose every SSH session
// can take a second) keeps it across them, where any other command drops
// it. Callers mark only commands they know to be reads; an unmarked
// command is taken as a change.
func ReadOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, readOnlyKey{}, true)
}

// IsReadOnly reports whether ctx was marked by ReadOnly.
func IsReadOnly(ctx context.Context) bool {
	v, _ := ctx.Value(readOnlyKey{}).(bool)
	return v
}

// MasterFormatter is implemented by providers that can tell, from what
// their machines carry, which tool built the cluster's masters: the
// flavor chosen when the operator names none (--flavor). "kubeup" for
// kube-up's GCE metadata or AWS user data; a provider without it, or one
// that answers "", has masters in hamaster's own format.
type MasterFormatter interface {
	MasterFormat() string
}

// FindMember finds replica's member in ms: by its member name, or by its
// peer URL for a learner that has not started yet (no name).
func FindMember(ms []etcdmember.Member, name, peerURL string) (etcdmember.Member, bool) {
	for _, m := range ms {
		if m.Name == name && name != "" {
			return m, true
		}
		if peerURL != "" && slices.Contains(m.PeerURLs, peerURL) {
			return m, true
		}
	}
	return etcdmember.Member{}, false
}
