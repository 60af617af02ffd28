package kubeadm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/providers"
)

var _ flavors.Viewer = (*Flavor)(nil)

// Labels and annotations kubeadm and the kubelet put on what the view
// reads: the control-plane role kubeadm's mark-control-plane phase
// gives a master's Node (cmd/kubeadm/app/constants LabelNodeRoleControlPlane),
// the static pods' component label (cmd/kubeadm/app/util/staticpod
// ComponentPod: component=<name>, tier=control-plane), and the
// annotations the kubelet puts on a static pod's mirror pod
// (pkg/kubelet/types ConfigHashAnnotationKey, ConfigMirrorAnnotationKey).
const (
	LabelControlPlane   = "node-role.kubernetes.io/control-plane"
	AnnotationHash      = "kubernetes.io/config.hash"
	AnnotationMirror    = "kubernetes.io/config.mirror"
	labelComponent      = "component"
	CertExpiryWarning   = 30 * 24 * time.Hour
	checkExpirationArgs = "kubeadm certs check-expiration -o json"
	// ManifestsDir and AdminConf are kubeadm's (cmd/kubeadm/app/constants
	// ManifestsSubDirName, AdminKubeConfigFileName).
	ManifestsDir = "/etc/kubernetes/manifests"
	AdminConf    = "/etc/kubernetes/admin.conf"
)

// StaticPodComponents are the static pods kubeadm writes on every
// stacked-etcd master (cmd/kubeadm/app/constants: KubeAPIServer,
// KubeControllerManager, KubeScheduler, Etcd).
var StaticPodComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"}

// View implements flavors.Viewer: kubeadm's view of the masters, read
// through the running masters as an operator reads it there —
// kubeadm-config (controlPlaneEndpoint, kubernetesVersion), the Nodes
// with the control-plane role and the static pods' mirror pods through
// admin.conf, and `kubeadm certs check-expiration -o json` on each
// running master — set beside etcd's members and the provider's
// machines, with a problem for each disagreement and the command that
// mends it; and the consumers still pinned to one master's own address
// (Pinned). A master that cannot be read is reported in its
// MasterView.Error; View fails only when no master answers.
func (f *Flavor) View(ctx context.Context) (flavors.View, error) {
	all, err := f.p.Instances().List(ctx)
	if err != nil {
		return flavors.View{}, err
	}
	in := ViewInput{Now: time.Now(), Certs: map[string][]CertificateInfo{}, CertErrors: map[string]string{}}
	var running []providers.Replica
	for _, r := range all {
		in.Machines = append(in.Machines, ViewMachine{Replica: r.Name, Node: f.m.MachineHostname(r.Name, r.Address), Address: r.Address, Running: r.Running()})
		if r.Running() {
			running = append(running, r)
		}
	}
	if len(running) == 0 {
		return flavors.View{}, errkind.Errorf(errkind.Unavailable, "kubeadm's view: no running master")
	}
	// The cluster-wide objects through the first master that answers.
	if err := throughFirst(running, func(master string) error { return f.readCluster(ctx, master, &in) }); err != nil {
		return flavors.View{}, errkind.Errorf(errkind.Unavailable, "kubeadm's view: no master's admin.conf answers: %w", err)
	}
	// Each master's certificates, on the master itself.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs, err := f.CheckExpiration(ctx, r.Name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				in.CertErrors[r.Name] = err.Error()
				return
			}
			in.Certs[r.Name] = cs
		}()
	}
	// What still names one master's own address (PinFinder).
	var pins []flavors.Pin
	var pinsErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		pins, pinsErr = f.Pinned(ctx)
	}()
	// etcd's members, to set the Nodes against.
	if cli, err := f.EtcdCluster(ctx, flavors.EtcdMain); err != nil {
		in.MembersError = err.Error()
	} else {
		ms, err := cli.Members(ctx)
		cli.Close()
		if err != nil {
			in.MembersError = err.Error()
		}
		in.Members = ms
	}
	wg.Wait()
	v := BuildView(in)
	v.Pinned = pins
	if pinsErr != nil {
		v.PinnedError = pinsErr.Error()
	}
	return v, nil
}

// readCluster reads kubeadm-config, the control-plane Nodes and the
// static pods' mirror pods through master's admin.conf.
func (f *Flavor) readCluster(ctx context.Context, master string, in *ViewInput) error {
	_, cfg, err := f.ClusterConfigurationOf(ctx, master)
	if err != nil {
		return err
	}
	in.Config = cfg
	out, _, err := f.m.RunOnMachine(providers.ReadOnly(ctx), master, adminKubectl+"get nodes -l "+LabelControlPlane+" -o json")
	if err != nil {
		return fmt.Errorf("list control-plane Nodes on %s: %w", master, err)
	}
	if in.Nodes, err = ParseNodes(out); err != nil {
		return fmt.Errorf("control-plane Nodes read on %s: %w", master, err)
	}
	out, _, err = f.m.RunOnMachine(providers.ReadOnly(ctx), master, adminKubectl+"-n kube-system get pods -l tier=control-plane -o json")
	if err != nil {
		return fmt.Errorf("list control-plane pods on %s: %w", master, err)
	}
	if in.Pods, err = ParseMirrorPods(out); err != nil {
		return fmt.Errorf("control-plane pods read on %s: %w", master, err)
	}
	return nil
}

// CheckExpiration runs `kubeadm certs check-expiration -o json` on
// master and parses what it prints.
func (f *Flavor) CheckExpiration(ctx context.Context, master string) ([]CertificateInfo, error) {
	out, stderr, err := f.m.RunOnMachine(providers.ReadOnly(ctx), master, checkExpirationArgs)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w (stderr: %s)", checkExpirationArgs, master, err, tail(stderr))
	}
	cs, err := ParseCheckExpiration(out)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", checkExpirationArgs, master, err)
	}
	return cs, nil
}

// CertificateInfo is one entry of `kubeadm certs check-expiration -o
// json`: output.kubeadm.k8s.io/v1alpha3 CertificateExpirationInfo's
// certificates and certificateAuthorities (cmd/kubeadm/app/apis/output/
// v1alpha3/types.go Certificate; filled by getInternalCfg's caller in
// cmd/kubeadm/app/cmd/certs.go newCmdCertsExpiration, from the renewal
// manager's GetCertificateExpirationInfo / GetCAExpirationInfo).
type CertificateInfo struct {
	Name           string    `json:"name"`
	ExpirationDate time.Time `json:"expirationDate"`
	// ResidualTime is in seconds, as kubeadm prints it.
	ResidualTime      int64  `json:"residualTime"`
	ExternallyManaged bool   `json:"externallyManaged"`
	CAName            string `json:"caName,omitempty"`
	Missing           bool   `json:"missing"`
	// Authority is true for an entry of certificateAuthorities.
	Authority bool `json:"-"`
}

// ParseCheckExpiration reads `kubeadm certs check-expiration -o json`:
// the certificates first, then the CAs (Authority set). What kubeadm
// prints before the document (its "[check-expiration] Reading
// configuration from the cluster..." lines) is skipped.
func ParseCheckExpiration(out []byte) ([]CertificateInfo, error) {
	i := bytes.IndexByte(out, '{')
	if i < 0 {
		return nil, fmt.Errorf("no JSON document in its output %q", abbrev(out))
	}
	var doc struct {
		Kind                   string            `json:"kind"`
		APIVersion             string            `json:"apiVersion"`
		Certificates           []CertificateInfo `json:"certificates"`
		CertificateAuthorities []CertificateInfo `json:"certificateAuthorities"`
	}
	if err := json.NewDecoder(bytes.NewReader(out[i:])).Decode(&doc); err != nil {
		return nil, fmt.Errorf("its output: %w", err)
	}
	if doc.Kind != "CertificateExpirationInfo" || !strings.HasPrefix(doc.APIVersion, "output.kubeadm.k8s.io/") {
		return nil, fmt.Errorf("its output is a %s %s, not output.kubeadm.k8s.io CertificateExpirationInfo", doc.APIVersion, doc.Kind)
	}
	out2 := doc.Certificates
	for _, c := range doc.CertificateAuthorities {
		c.Authority = true
		out2 = append(out2, c)
	}
	return out2, nil
}

// NodeInfo is what the view reads of a Node.
type NodeInfo struct {
	Name           string
	ControlPlane   bool
	Ready          bool
	KubeletVersion string
	InternalIP     string
}

// ParseNodes reads `kubectl get nodes -o json` (a v1 List of Nodes).
func ParseNodes(out []byte) ([]NodeInfo, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"conditions"`
				Addresses []struct {
					Type    string `json:"type"`
					Address string `json:"address"`
				} `json:"addresses"`
				NodeInfo struct {
					KubeletVersion string `json:"kubeletVersion"`
				} `json:"nodeInfo"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	var ns []NodeInfo
	for _, it := range list.Items {
		_, cp := it.Metadata.Labels[LabelControlPlane]
		n := NodeInfo{Name: it.Metadata.Name, ControlPlane: cp, KubeletVersion: it.Status.NodeInfo.KubeletVersion}
		for _, c := range it.Status.Conditions {
			if c.Type == "Ready" {
				n.Ready = c.Status == "True"
			}
		}
		for _, a := range it.Status.Addresses {
			if a.Type == "InternalIP" && n.InternalIP == "" {
				n.InternalIP = a.Address
			}
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// MirrorPod is a static pod's mirror pod: its component, Node and the
// kubelet's hash of the manifest it runs.
type MirrorPod struct {
	Component, Node, Hash string
}

// ParseMirrorPods reads `kubectl get pods -o json`, keeping the mirror
// pods (those the kubelet annotates kubernetes.io/config.mirror).
func ParseMirrorPods(out []byte) ([]MirrorPod, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("pods: %w", err)
	}
	var ps []MirrorPod
	for _, it := range list.Items {
		if _, mirror := it.Metadata.Annotations[AnnotationMirror]; !mirror {
			continue
		}
		ps = append(ps, MirrorPod{Component: it.Metadata.Labels[labelComponent], Node: it.Spec.NodeName, Hash: it.Metadata.Annotations[AnnotationHash]})
	}
	return ps, nil
}

// ViewMachine is one of the provider's machines as the view sees it.
type ViewMachine struct {
	Replica string
	// Node is the Node (and etcd member) name kubeadm gives it.
	Node    string
	Address string
	Running bool
}

// ViewInput is everything View read; BuildView decides from it alone.
type ViewInput struct {
	Now          time.Time
	Config       ClusterConfiguration
	Machines     []ViewMachine
	Nodes        []NodeInfo
	Pods         []MirrorPod
	Members      []etcdmember.Member
	MembersError string
	// Certs and CertErrors are by replica.
	Certs      map[string][]CertificateInfo
	CertErrors map[string]string
}

// BuildView is kubeadm's view from what was read: one MasterView per
// machine (in the provider's order), then one per control-plane Node no
// machine has; and the problems, each with its command:
//   - a certificate expiring within 30 days (or expired): `hamaster
//     rotate-certs` (the flavor's RenewCerts: kubeadm certs renew), or
//     the CA's own rotation
//     (kubeadm renews no CA) or the external CA for one kubeadm does not
//     manage;
//   - a control-plane Node with no etcd member, or with no machine:
//     `hamaster remove-replica --name X` (the Node deleted by hand when
//     no machine is left to remove);
//   - an etcd member or learner with no control-plane Node:
//     `hamaster remove-replica` of its machine, or --member-id when none
//     has it;
//   - a running machine without its Node, a Node not Ready, a master
//     whose kubelet runs no mirror pod of one of kubeadm's components.
func BuildView(in ViewInput) flavors.View {
	v := flavors.View{Endpoint: in.Config.ControlPlaneEndpoint, Version: in.Config.KubernetesVersion, Masters: []flavors.MasterView{}}
	problem := func(format string, args ...any) { v.Problems = append(v.Problems, fmt.Sprintf(format, args...)) }
	nodes := map[string]NodeInfo{}
	for _, n := range in.Nodes {
		if n.ControlPlane {
			nodes[n.Name] = n
		}
	}
	pods := map[string]map[string]string{}
	for _, p := range in.Pods {
		if pods[p.Node] == nil {
			pods[p.Node] = map[string]string{}
		}
		pods[p.Node][p.Component] = p.Hash
	}
	memberOf := map[string]etcdmember.Member{}
	for _, m := range in.Members {
		if m.Name != "" {
			memberOf[m.Name] = m
		}
	}
	byNode := map[string]ViewMachine{}
	for _, m := range in.Machines {
		byNode[m.Node] = m
	}
	for _, m := range in.Machines {
		mv := flavors.MasterView{Replica: m.Replica, Node: m.Node}
		n, hasNode := nodes[m.Node]
		if hasNode {
			mv.NodeReady, mv.ControlPlane, mv.KubeletVersion = n.Ready, true, n.KubeletVersion
			mv.StaticPods = pods[m.Node]
		}
		for _, c := range in.Certs[m.Replica] {
			if c.Missing {
				// super-admin.conf exists on the first master only
				// (kubeadm init, v1.29+); an external CA's key is absent.
				continue
			}
			mv.Certificates = append(mv.Certificates, flavors.CertificateExpiry{Name: c.Name, Expires: c.ExpirationDate, CA: c.CAName, External: c.ExternallyManaged})
			if left := c.ExpirationDate.Sub(in.Now); left < CertExpiryWarning {
				when := fmt.Sprintf("expires in %dd (%s)", int(left.Hours()/24), c.ExpirationDate.UTC().Format(time.RFC3339))
				if left <= 0 {
					when = "EXPIRED " + c.ExpirationDate.UTC().Format(time.RFC3339)
				}
				switch {
				case c.ExternallyManaged:
					problem("certificate %s on %s %s: kubeadm does not manage it (external CA): renew it with that CA", c.Name, m.Replica, when)
				case c.Authority:
					problem("CA %s on %s %s: kubeadm renews no CA; rotate it by hand on every master (kubeadm docs: manual rotation of CA certificates)", c.Name, m.Replica, when)
				default:
					problem("certificate %s on %s %s: `hamaster rotate-certs --yes` renews it (kubeadm certs renew all on one drained master at a time, its static pods restarted)", c.Name, m.Replica, when)
				}
			}
		}
		if e := in.CertErrors[m.Replica]; e != "" {
			mv.Error = e
		}
		switch {
		case !m.Running:
			if hasNode {
				problem("machine %s is not running; its control-plane Node %s remains: bring it back, or `hamaster remove-replica --name %s`", m.Replica, m.Node, m.Replica)
			}
		case !hasNode:
			problem("master %s runs without a control-plane Node %s (a join cut short?): `hamaster remove-replica --name %s`, then add-replica", m.Replica, m.Node, m.Replica)
		default:
			if !n.Ready {
				problem("Node %s (%s) is not Ready: check its kubelet (`systemctl status kubelet` on %s)", m.Node, m.Replica, m.Replica)
			}
			for _, c := range StaticPodComponents {
				if _, ok := mv.StaticPods[c]; !ok {
					problem("Node %s (%s) has no mirror pod of %s: its kubelet does not run %s/%s.yaml", m.Node, m.Replica, c, ManifestsDir, c)
				}
			}
		}
		if hasNode && in.MembersError == "" {
			if _, ok := memberOf[m.Node]; !ok {
				problem("control-plane Node %s has no etcd member: `hamaster remove-replica --name %s`", m.Node, m.Replica)
			}
		}
		v.Masters = append(v.Masters, mv)
	}
	var extra []string
	for name := range nodes {
		if _, ok := byNode[name]; !ok {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		n := nodes[name]
		v.Masters = append(v.Masters, flavors.MasterView{Node: name, NodeReady: n.Ready, ControlPlane: true, KubeletVersion: n.KubeletVersion, StaticPods: pods[name], Error: "no machine"})
		if m, ok := memberOf[name]; ok {
			problem("control-plane Node %s has no machine but etcd member %s: `hamaster remove-replica --member-id %s`, then `kubectl --kubeconfig %s delete node %s` on a master", name, m.IDHex(), m.IDHex(), AdminConf, name)
		} else {
			problem("control-plane Node %s has no machine and no etcd member: `hamaster remove-replica --name %s`, or `kubectl --kubeconfig %s delete node %s` on a master", name, name, AdminConf, name)
		}
	}
	if in.MembersError == "" {
		for _, m := range in.Members {
			if _, ok := nodes[m.Name]; ok && m.Name != "" {
				continue
			}
			kind := "member"
			if m.Learner {
				kind = "learner"
			}
			label := m.Name
			if label == "" {
				label = "(unstarted)"
			}
			owner := machineOfPeer(in.Machines, m.PeerURLs)
			if owner != "" {
				problem("etcd %s %s %s (%s) has no control-plane Node (a join under way, or cut short): `hamaster remove-replica --name %s`", kind, m.IDHex(), label, strings.Join(m.PeerURLs, ","), owner)
			} else {
				problem("etcd %s %s %s (%s) has no control-plane Node and no machine: `hamaster remove-replica --member-id %s`", kind, m.IDHex(), label, strings.Join(m.PeerURLs, ","), m.IDHex())
			}
		}
	}
	return v
}

// machineOfPeer is the replica whose address is the host of one of
// peerURLs, "" for none.
func machineOfPeer(ms []ViewMachine, peerURLs []string) string {
	for _, p := range peerURLs {
		u, err := url.Parse(p)
		if err != nil {
			continue
		}
		if i := slices.IndexFunc(ms, func(m ViewMachine) bool { return m.Address != "" && m.Address == u.Hostname() }); i >= 0 {
			return ms[i].Replica
		}
	}
	return ""
}

// abbrev is b, cut short for an error.
func abbrev(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
