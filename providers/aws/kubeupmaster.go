package aws

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/remote"
)

// KubeUpProvider is the AWS provider on masters in kube-up's AWS format
// (flavors/kubeup UserData): New returns it when the cluster's masters'
// user data is that format. What such a master is (etcd-<hostname>
// members in main and events, kube-up's replicate-master-instance clone,
// the certificates it carries, the apiserver's port 443) is the kubeup
// flavor's (flavors/kubeup); the provider keeps the infrastructure: the
// user data the template is stored in, the NLB on the flavor's port, and
// the way in (DialMachine: SSH to a master, directly or through the
// bastion; MachineHostname: EC2's ip-a-b-c-d, which resolves inside the
// VPC).
type KubeUpProvider struct {
	*Provider
}

var (
	_ providers.MachineDialer   = (*Provider)(nil)
	_ providers.MasterFormatter = (*KubeUpProvider)(nil)
	_ providers.MasterFormatter = (*Provider)(nil)
)

// Hostname is the hostname EC2 gives an instance with this private IP
// (its private DNS name's first label).
func Hostname(privateIP string) string {
	return "ip-" + strings.ReplaceAll(privateIP, ".", "-")
}

// The flavors' names whose masters an AWS cluster may have
// (flavors.KubeUp, flavors.Hamaster, which a provider does not import):
// Settings.Flavor names one of them, or neither.
const (
	flavorKubeUp   = "kubeup"
	flavorHamaster = "hamaster"
)

// MasterFormat implements providers.MasterFormatter: kube-up's.
func (k *KubeUpProvider) MasterFormat() string { return flavorKubeUp }

// MasterFormat implements providers.MasterFormatter: hamaster's own.
func (p *Provider) MasterFormat() string { return "" }

// MachineHostname implements providers.MachineDialer: EC2's hostname of
// the instance at address (mapped to its private IP), or, with no
// address, of replica's instance as last described.
func (p *Provider) MachineHostname(replica, address string) string {
	ip := p.amap.toCloud(address)
	if address == "" {
		v, ok := p.privIPs.Load(replica)
		if !ok {
			return ""
		}
		ip = v.(string)
	}
	return Hostname(ip)
}

// DialMachine implements providers.MachineDialer: addr as master machine
// sees it (its own 127.0.0.1:<port>), through SSH (--ssh-user) to the
// master's public address, or to its private one through the bastion.
func (p *Provider) DialMachine(ctx context.Context, machine, addr string) (net.Conn, error) {
	if !p.sshEnabled() {
		return nil, errkind.Errorf(errkind.InvalidArgument, "kube-up masters serve etcd on their own 127.0.0.1 only: give --%s (and --%s or --%s) so hamaster can tunnel to it", remote.OptUser, remote.OptKey, OptSSHBastion)
	}
	is, err := p.inst.describe(ctx, machine)
	if err != nil {
		return nil, err
	}
	for _, i := range is {
		if i.state != providers.StateRunning {
			continue
		}
		a, via, err := p.sshAddress(i)
		if err != nil {
			return nil, err
		}
		conn, err := p.sshDialThrough(ctx, a, via, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("ssh %s (%s): %w", machine, a, err)
		}
		return conn, nil
	}
	return nil, errkind.Errorf(errkind.NotFound, "master %s: no running instance", machine)
}

// detectKubeUp reports whether the cluster's running masters carry
// kube-up's AWS user data, as the flavors recognize it
// (providers.Settings.Recognize); with none tagged as hamaster's, it
// reads kube-up's master 0 found by kube-up's tags, changing nothing.
func (p *Provider) detectKubeUp(ctx context.Context) (bool, error) {
	is, err := p.inst.describe(ctx, "")
	if err != nil {
		return false, err
	}
	if len(is) == 0 {
		// Not adopted yet: kube-up's master 0 by kube-up's tags, read
		// only (adopt.go).
		m, ok, err := p.kubeUpMaster(ctx)
		if err != nil || !ok {
			return false, err
		}
		p.unadopted = aws.ToString(m.InstanceId)
		is = []instance{p.toInstance(m)}
	}
	for _, i := range is {
		if i.state != providers.StateRunning {
			continue
		}
		ud, err := p.inst.userData(ctx, i)
		if err != nil {
			return false, err
		}
		if p.recognize == nil {
			return false, errkind.Errorf(errkind.InvalidArgument, "--flavor: the masters' format cannot be told here: set %s or %s", flavorKubeUp, flavorHamaster)
		}
		return p.recognize(map[string]string{providers.DocUserData: string(ud)}) == flavorKubeUp, nil
	}
	return false, nil
}
