package workflows

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/lb"
	"github.com/hamaster/hamaster/providers"
)

// Step names of the flavors whose masters join with their own tool
// (flavors.Joiner) and record the cluster's endpoint (flavors.EndpointMover).
const (
	StepConvertEndpoint = "convert-endpoint"
	StepJoin            = "join"
	StepLeave           = "leave"
)

// joinerOf is the flavor's Joiner, nil when its masters boot from a
// cloned template with a member hamaster added.
func joinerOf(d *Deps) flavors.Joiner {
	return d.FlavorCaps().Joiner
}

// moverOf is the flavor's EndpointMover, nil when its masters do not
// record the cluster's endpoint.
func moverOf(d *Deps) flavors.EndpointMover {
	return d.FlavorCaps().EndpointMover
}

// lbEndpoint is the cluster endpoint the static IP (the load balancer,
// once there is one) serves: host:port.
func lbEndpoint(ctx context.Context, d *Deps) (string, error) {
	ip, _, err := d.Provider.StaticIP().Get(ctx)
	if err != nil {
		return "", err
	}
	if ip == "" {
		return "", errkind.Errorf(errkind.FailedPrecondition, "cluster %s has no static IP or VIP to be its endpoint", d.Cluster)
	}
	return net.JoinHostPort(ip, strconv.Itoa(providers.EndpointPortOf(d.Provider))), nil
}

// moveEndpoint makes endpoint (host:port) the cluster's, as kubeadm's
// users have had to by hand (kubernetes/kubeadm#1955, kubernetes#95564):
// first every running master's apiserver certificate names the new host
// as well as every name it had (clients on the old address keep
// working), then the endpoint is recorded cluster-wide (kubeadm-config,
// cluster-info: what later joins read), then each master's kubeconfigs
// move to it. Between the two, the consumers the flavor's tool rendered
// from the endpoint inside the cluster (kube-proxy's kubeconfig) move
// and are restarted: once every certificate names the endpoint, so they
// verify it. One master at a time; every call idempotent, so a resumed
// step redoes only what is left.
func moveEndpoint(ctx context.Context, d *Deps, r *Run, mv flavors.EndpointMover, endpoint string) error {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return errkind.Errorf(errkind.InvalidArgument, "endpoint %q: %v (want host:port)", endpoint, err)
	}
	masters, err := runningMasters(ctx, d)
	if err != nil {
		return err
	}
	for _, m := range masters {
		r.Waiting("the apiserver certificate of %s to name %s too", m.Name, host)
		if err := mv.AddServingSANs(ctx, m, host); err != nil {
			return fmt.Errorf("add %s to the apiserver certificate of %s: %w", host, m.Name, err)
		}
	}
	r.Waiting("recording %s as the cluster's endpoint", endpoint)
	if err := mv.SetEndpoint(ctx, endpoint); err != nil {
		return fmt.Errorf("record endpoint %s: %w", endpoint, err)
	}
	r.Waiting("the in-cluster consumers (kube-proxy, the workers' kubelets) to use https://%s", endpoint)
	if err := mv.PointConsumers(ctx, endpoint); err != nil {
		return fmt.Errorf("point the in-cluster consumers at %s: %w", endpoint, err)
	}
	for _, m := range masters {
		r.Waiting("the kubeconfigs of %s to use https://%s", m.Name, endpoint)
		if err := mv.PointMaster(ctx, m, "https://"+endpoint); err != nil {
			return fmt.Errorf("point the kubeconfigs of %s at %s: %w", m.Name, endpoint, err)
		}
	}
	r.Info("the cluster's endpoint is now %s", endpoint)
	return nil
}

// runningMasters lists the running replicas, refusing when one is not
// running: a master left out would keep the old endpoint (or a
// certificate without the new name).
func runningMasters(ctx context.Context, d *Deps) ([]providers.Replica, error) {
	rs, err := d.Provider.Instances().List(ctx)
	if err != nil {
		return nil, err
	}
	var out []providers.Replica
	var down []string
	for _, rep := range rs {
		switch {
		case rep.Running():
			out = append(out, rep)
		case rep.State != providers.StateProvisioning:
			down = append(down, rep.Name+" ("+rep.State+")")
		}
	}
	if len(down) > 0 {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "masters not running: %s: the endpoint moves on every master (start them, or 'hamaster remove-replica' them, first)", strings.Join(down, ", "))
	}
	if len(out) == 0 {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s has no running master", d.Cluster)
	}
	return out, nil
}

// convertStep is add-replica's conversion to HA, for a flavor whose
// masters record the endpoint: a cluster that records none (a single
// master built without controlPlaneEndpoint, kubeadm's common start)
// takes the load balancer's (the VIP) before the new master joins, since
// a control-plane join needs one. A cluster that records one already
// keeps it: the operator chose it ('hamaster endpoint set' moves it).
func convertStep(d *Deps) Step {
	return Step{
		Name: StepConvertEndpoint,
		Plan: []string{"when the masters record no endpoint: each master's apiserver certificate gains the VIP/LB address (old names kept)", "the endpoint recorded cluster-wide (kubeadm-config controlPlaneEndpoint, cluster-info)", "kube-proxy's kubeconfig (its ConfigMap) moved to it and its DaemonSet rolled once", "each worker's kubelet.conf that names a master's own address moved to it, one worker at a time (its kubelet restarted, its Node heartbeating again; a worker that does not answer named, with the command that moves it by hand)", "each master's kubeconfigs moved to it, the kubelet restarted"},
		Run: func(ctx context.Context, r *Run) error {
			mv := moverOf(d)
			if mv == nil {
				return nil
			}
			want := keyEndpoint.Get(r)
			if want == "" {
				cur, err := mv.Endpoint(ctx)
				if err != nil {
					return err
				}
				if cur != "" {
					r.Info("the masters record endpoint %s; the new master joins through it", cur)
					return nil
				}
				if want, err = lbEndpoint(ctx, d); err != nil {
					return err
				}
				r.Info("converting cluster %s to HA: its endpoint becomes %s", d.Cluster, want)
				if err := keyEndpoint.Set(r, want); err != nil {
					return err
				}
			}
			return moveEndpoint(ctx, d, r, mv, want)
		},
	}
}

// joinStep makes the claimed machine a master with the flavor's own tool
// (kubeadm join --control-plane: its member added as a learner and
// promoted by kubeadm). A join interrupted by a crash is undone before
// it runs again, and one that fails is undone by the flavor: no learner,
// member or Node of the replica survives a failed add.
func joinStep(d *Deps, j flavors.Joiner, p AddParams) Step {
	return Step{
		Name: StepJoin,
		Plan: []string{"when a previous attempt was interrupted: its join waited for; unless it completed, its member removed through another master and the flavor's tool reset on the machine", "the flavor's join on the machine (kubeadm join --control-plane with a fresh token and certificate key), bounded; a failed join undone"},
		Run: func(ctx context.Context, r *Run) error {
			name := r.Param("name")
			rep, err := d.Provider.Instances().Get(ctx, name)
			if err != nil {
				return err
			}
			if rep.Address == "" {
				rep.Address = keyAddress.Get(r)
			}
			if keyJoinStarted.IsSet(r) {
				// The interrupted join may still run on the machine: the
				// flavor waits for it before judging it.
				if rep.Running() {
					r.Waiting("the interrupted join of %s to end", name)
					joined, err := j.Joined(ctx, rep, p.Timeout)
					if err != nil {
						return err
					}
					if joined && verifyMember(ctx, d, providers.EtcdMain, name, true, []string{name}) == nil {
						return nil // the interrupted join had finished
					}
				}
				r.Info("undoing the interrupted join of %s before joining it again", name)
				if err := removeMembers(ctx, d, name, rep.Address); err != nil {
					return err
				}
				if err := j.Leave(ctx, rep); err != nil {
					return fmt.Errorf("undo the interrupted join of %s: %w", name, err)
				}
			}
			if err := keyJoinStarted.Mark(r); err != nil {
				return err
			}
			r.Waiting("%s to join the control plane", name)
			return j.Join(ctx, rep, p.Timeout)
		},
	}
}

// removeMembers removes replica's member from every etcd cluster the
// flavor runs, through the other masters; absent is success.
func removeMembers(ctx context.Context, d *Deps, replica, address string) error {
	cs := d.Flavor().EtcdClusters()
	for i := len(cs) - 1; i >= 0; i-- {
		cli, err := d.Flavor().EtcdCluster(ctx, cs[i], replica)
		if err != nil {
			return err
		}
		ms, err := cli.Members(ctx)
		if err == nil {
			if m, ok := d.findMember(ms, cs[i], replica, address); ok {
				if err = cli.Remove(ctx, m.ID); err != nil && !errors.Is(err, errkind.NotFound) {
					err = fmt.Errorf("remove etcd %s member %s of %s: %w", cs[i], m.IDHex(), replica, err)
				} else {
					err = nil
				}
			}
		}
		cli.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// stopAPIServerStep stops the drained victim's apiserver while its etcd
// member still serves it (flavors.APIServerStopper), as stop-replica
// stops a replica's machine for the other flavors.
func stopAPIServerStep(d *Deps, st flavors.APIServerStopper, victim string) Step {
	return Step{
		Name: StepStopReplica,
		Plan: []string{"the victim's apiserver stopped alone (its manifest out of the static pod path), its etcd member still serving it, so its last clients are closed by its graceful shutdown"},
		Run: func(ctx context.Context, r *Run) error {
			rep, err := d.Provider.Instances().Get(ctx, victim)
			if errors.Is(err, errkind.NotFound) {
				return nil // no control plane left there
			} else if err != nil {
				return err
			}
			r.Waiting("the apiserver of %s to stop", victim)
			return st.StopAPIServer(ctx, rep)
		},
	}
}

// leaveStep undoes the flavor's tool on the victim once its member is
// gone (kubeadm reset -f, which then never retries against or wipes the
// live cluster: kubeadm#3225, #2144) and deletes its Node, before the
// machine is released.
func leaveStep(d *Deps, j flavors.Joiner, victim string) Step {
	return Step{
		Name: StepLeave,
		Plan: []string{"the flavor's leave on the victim: kubeadm reset -f (its member already removed), its Node deleted through another master"},
		Run: func(ctx context.Context, r *Run) error {
			rep, err := d.Provider.Instances().Get(ctx, victim)
			if errors.Is(err, errkind.NotFound) {
				// Not a master any more (reset already): the Node may remain.
				rep = providers.Replica{Name: victim, Address: keyAddress.Get(r)}
			} else if err != nil {
				return err
			}
			if rep.Address == "" {
				rep.Address = keyAddress.Get(r)
			}
			r.Waiting("%s to leave the control plane", victim)
			return j.Leave(ctx, rep)
		},
	}
}

// keepsEndpoint reports whether the masters record the load balancer as
// the cluster's endpoint: the last removal then leaves the load balancer
// (the VIP) on the last master instead of demoting it, since deleting it
// would cut every client and kubelet configured for it.
func keepsEndpoint(ctx context.Context, d *Deps) (string, bool, error) {
	mv := moverOf(d)
	if mv == nil {
		return "", false, nil
	}
	cur, err := mv.Endpoint(ctx)
	if err != nil || cur == "" {
		return "", false, err
	}
	if exists, err := lb.Exists(ctx, d.Provider.LoadBalancer()); err != nil || !exists {
		return "", false, err
	}
	return cur, true, nil
}

// EndpointParams are endpoint set's arguments.
type EndpointParams struct {
	// Endpoint is host:port; a bare host gets the load balancer's port.
	Endpoint string
}

// EndpointSet builds the endpoint-set workflow (hamaster endpoint set):
// the cluster's endpoint moved to p.Endpoint on every master, for a
// flavor whose masters record it (kubeadm), with clients on the old
// address served throughout.
func EndpointSet(d *Deps, p EndpointParams) *Workflow {
	wf := &Workflow{Name: "endpoint-set", Params: map[string]string{"endpoint": p.Endpoint}}
	wf.Check = func(context.Context) error {
		if moverOf(d) == nil {
			return errkind.Errorf(errkind.FailedPrecondition, "the %s flavor's masters do not record the cluster's endpoint: their clients use the static IP or load balancer hamaster keeps (nothing to set)", d.Flavor().Name())
		}
		return nil
	}
	wf.Steps = []Step{
		{
			Name: StepPreflight, Always: true, Plan: []string{"every master running", "every etcd voter healthy", "the new endpoint accepts connections"},
			Run: func(ctx context.Context, r *Run) error {
				if _, err := runningMasters(ctx, d); err != nil {
					return err
				}
				dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", r.Param("endpoint"))
				cancel()
				if err != nil {
					return errkind.Errorf(errkind.FailedPrecondition, "the new endpoint %s does not accept connections (%v): point it at the apiservers (the VIP or load balancer) first", r.Param("endpoint"), err)
				}
				conn.Close()
				ms, err := d.members(ctx)
				if err != nil {
					return err
				}
				for _, m := range ms {
					if !m.Learner && !m.Healthy {
						return errkind.Errorf(errkind.FailedPrecondition, "etcd voter %s is unhealthy: the endpoint moves only on a healthy cluster ('hamaster status' says what to do)", m.IDHex())
					}
				}
				return nil
			},
		},
		{
			Name: StepConvertEndpoint, Plan: []string{"each master's apiserver certificate gains the endpoint's host (old names kept), one master at a time", "kubeadm-config controlPlaneEndpoint and cluster-info's server set, the endpoint replaced recorded as a former one", "kube-proxy's kubeconfig (its ConfigMap) moved and its DaemonSet rolled once", "each worker's kubelet.conf that names a master's own address or a former endpoint moved, one worker at a time (its kubelet restarted, its Node heartbeating again)", "each master's kubeconfigs moved, its kubelet restarted"},
			Run: func(ctx context.Context, r *Run) error {
				return moveEndpoint(ctx, d, r, moverOf(d), r.Param("endpoint"))
			},
		},
	}
	return wf
}
