package workflows

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hamaster/hamaster/certs"
	"github.com/hamaster/hamaster/dns"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
	"github.com/hamaster/hamaster/flavors"
	"github.com/hamaster/hamaster/internal/ctxutil"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/providers"
)

// Deps is what the workflows need from the outside world.
type Deps struct {
	Provider providers.Provider
	// Master is the cluster's flavor (what its masters are), bound to
	// Provider (flavors/registry.Bind); required: without it the
	// workflows refuse to start (ErrNoFlavor). Its capabilities are
	// resolved on first use (FlavorCaps).
	Master   flavors.Flavor
	Cluster  string
	StateDir string
	Sink     Sink
	Logger   *slog.Logger
	// Out receives instructions for the operator (the static DNS driver's
	// records).
	Out io.Writer
	// KeepSnapshots is how many etcd snapshots to keep (0:
	// DefaultKeepSnapshots); older ones are deleted after each new one.
	KeepSnapshots int
	// fence proves the cluster lock is held (set by Execute while it holds
	// it; nested workflows use it too).
	fence func(ctx context.Context) error
	// AfterStep is the test-only crash hook (see Runner.AfterStep).
	AfterStep func(step string) error
	// Holder names the command in the cluster lock.
	Holder string
	// Args, User, Host and Version go into the cluster's history.
	Args       []string
	User, Host string
	Version    string
	// Heartbeat is the interval of a wait's "still waiting" events
	// (DefaultHeartbeat when zero).
	Heartbeat time.Duration

	mu   sync.Mutex // guards the lazily loaded ca and http
	ca   *certs.CA
	http *http.Client

	flavorOnce sync.Once
	flavorCaps flavors.Capabilities // resolved when the flavor is bound

	providerOnce sync.Once
	providerCaps providers.Capabilities
}

func (d *Deps) clusterDir() string { return filepath.Join(d.StateDir, d.Cluster) }

// PKIDir is where the cluster's CA and issued certificates are kept.
func PKIDir(stateDir, cluster string) string { return providers.PKIDir(stateDir, cluster) }

// CA loads the cluster's CA from the state dir.
func (d *Deps) CA() (*certs.CA, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loadCA()
}

func (d *Deps) loadCA() (*certs.CA, error) {
	if d.ca != nil {
		return d.ca, nil
	}
	dir := PKIDir(d.StateDir, d.Cluster)
	ca, err := certs.LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "cluster %s: load CA from %s: %w", d.Cluster, dir, err)
	}
	d.ca = ca
	return ca, nil
}

// HTTP returns a client that trusts the cluster's CA, for /readyz and
// /version probes.
func (d *Deps) HTTP(ctx context.Context) (*http.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.http != nil {
		return d.http, nil
	}
	pctx, cancel := ctxutil.WithoutDeadline(ctx, trustPoolTimeout)
	defer cancel()
	pool, err := d.trustPool(pctx)
	if err != nil {
		return nil, err
	}
	serverName := d.Flavor().APIServerName()
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}
	if dl := d.ProviderCaps().APIServerDialer; dl != nil {
		tr.DialContext = dl.DialAPIServer // through the provider's tunnel
	}
	d.http = &http.Client{
		Timeout:   2 * time.Second,
		Transport: tr,
	}
	return d.http, nil
}

// trustPoolTimeout bounds the read of the CA the probes' client trusts.
// That read is set-up, not the probe: for a flavor whose masters carry
// the CA it lists the masters and reads a file over SSH, sessions that
// take a second or more each to start on real hosts (PAM, motd, the
// user's shell profile), so a probe attempt's deadline (waitFor's 3 s)
// does not bound it: only the caller's cancellation and this do. Once
// read, the client is kept.
const trustPoolTimeout = 2 * time.Minute

// trustPool is the CA the apiservers' certificates chain to: the one the
// masters carry (flavors.Flavor.MasterCA), else the cluster CA in the
// state dir. Called with d.mu held.
func (d *Deps) trustPool(ctx context.Context) (*x509.CertPool, error) {
	f := d.Flavor()
	if d.FlavorCaps().ReplicaCertIssuer != nil { // hamaster issued them
		ca, err := d.loadCA()
		if err != nil {
			return nil, err
		}
		return ca.Pool(), nil
	}
	pemBytes, err := f.MasterCA(ctx)
	if err != nil {
		return nil, fmt.Errorf("the masters' cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "the masters' cluster CA is not a PEM certificate")
	}
	return pool, nil
}

// Probe GETs base+path and returns the body of a 200, or an error with
// the status and body.
func (d *Deps) Probe(ctx context.Context, base, path string) (string, error) {
	c, err := d.HTTP(ctx)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s%s: %s: %s", base, path, resp.Status, trimBody(body))
	}
	return string(body), nil
}

func trimBody(b []byte) string {
	s := string(b)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// ReplicaVersion asks a replica's apiserver for its version.
func (d *Deps) ReplicaVersion(ctx context.Context, r providers.Replica) (string, error) {
	body, err := d.Probe(ctx, d.Provider.APIServerURL(r), "/version")
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return "", fmt.Errorf("decode /version of %s: %w", r.Name, err)
	}
	return v.GitVersion, nil
}

// waitFor polls check every interval until it returns nil or ctx ends; the
// error names what was awaited and the last failure.
func waitFor(ctx context.Context, r *Run, what string, interval time.Duration, check func(context.Context) error) error {
	if r != nil {
		r.Waiting("%s", what)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		// A check cut short by the overall deadline says nothing about
		// the thing checked: keep the last real answer.
		if ctx.Err() == nil || last == nil {
			last = err
			if r != nil {
				r.Observe(err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return &WaitError{What: what, Last: last, Err: ctx.Err()}
		case <-tick.C:
		}
	}
}

// records returns the DNS driver of kind: the static driver prints to
// d.Out; managed DNS comes from the provider.
func (d *Deps) records(kind string) (dns.Records, error) {
	if kind == "" || kind == "static" {
		out := d.Out
		if out == nil {
			out = io.Discard
		}
		return dns.NewStatic(out), nil
	}
	return d.Provider.DNS(kind)
}

// WaitError is a wait that ran out: what was awaited and the last answer.
type WaitError struct {
	What string
	Last error
	Err  error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("wait for %s: %v (last: %v)", e.What, e.Err, e.Last)
}

func (e *WaitError) Unwrap() error { return e.Err }

// Endpoint is the cluster's recorded client endpoint settings.
type Endpoint struct {
	DNSKind string `json:"dns_kind,omitempty"`
	DNSName string `json:"dns_name,omitempty"`
}

func endpointFile(stateDir, cluster string) string {
	return filepath.Join(stateDir, cluster, "endpoint.json")
}

// LoadEndpoint reads the recorded DNS settings (zero value when none).
func LoadEndpoint(stateDir, cluster string) (Endpoint, error) {
	var e Endpoint
	b, err := os.ReadFile(endpointFile(stateDir, cluster))
	if errors.Is(err, os.ErrNotExist) {
		return e, nil
	}
	if err != nil {
		return e, err
	}
	return e, json.Unmarshal(b, &e)
}

func saveEndpoint(stateDir, cluster string, e Endpoint) error {
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(endpointFile(stateDir, cluster), b, 0o600)
}

// Flavor is the cluster's flavor, d.Master, bound to the provider before
// the Deps are built (flavors/registry.Bind). Deps built without one (a
// test's) get a flavor whose every call that can fail fails with
// ErrNoFlavor, and Execute and Status refuse to start.
func (d *Deps) Flavor() flavors.Flavor {
	d.flavorOnce.Do(func() { d.flavorCaps = flavors.CapabilitiesOf(d.Master) })
	if d.Master == nil {
		return noFlavor{}
	}
	return d.Master
}

// FlavorCaps are the cluster's flavor's optional capabilities
// (flavors.CapabilitiesOf), resolved once when the flavor is bound: the
// workflows and the CLI check them, never the flavor's type.
func (d *Deps) FlavorCaps() flavors.Capabilities {
	d.Flavor()
	return d.flavorCaps
}

// ProviderCaps are the provider's optional capabilities and those of its
// Instances (providers.CapabilitiesOf), resolved once on the first call:
// the workflows and the CLI check them, never the provider's type.
func (d *Deps) ProviderCaps() providers.Capabilities {
	d.providerOnce.Do(func() { d.providerCaps = providers.CapabilitiesOf(d.Provider) })
	return d.providerCaps
}

// Etcd connects to the cluster's main etcd through running replicas other
// than those named in exclude, the flavor's way.
func (d *Deps) Etcd(ctx context.Context, exclude ...string) (*etcdmember.Client, error) {
	return d.Flavor().EtcdCluster(ctx, providers.EtcdMain, exclude...)
}

// members lists the main etcd cluster's members, reached as Etcd reaches
// them; a listing that fails is errkind.FailedPrecondition (etcd
// unreachable: nothing can be checked, nothing may change).
func (d *Deps) members(ctx context.Context, exclude ...string) ([]etcdmember.Member, error) {
	cli, ms, err := d.etcdMembers(ctx, providers.EtcdMain, exclude, func(err error) error {
		return errkind.Errorf(errkind.FailedPrecondition, "etcd unreachable: %w", err)
	})
	if err != nil {
		return nil, err
	}
	cli.Close()
	return ms, nil
}

// etcdMembers connects to etcd cluster through replicas other than
// exclude and lists its members; the caller closes cli. A connection that
// fails is returned as it is, a listing that fails through listFailed
// (nil: as it is).
func (d *Deps) etcdMembers(ctx context.Context, cluster string, exclude []string, listFailed func(error) error) (cli *etcdmember.Client, ms []etcdmember.Member, err error) {
	cli, err = d.Flavor().EtcdCluster(ctx, cluster, exclude...)
	if err != nil {
		return nil, nil, err
	}
	if ms, err = cli.Members(ctx); err != nil {
		cli.Close()
		if listFailed != nil {
			err = listFailed(err)
		}
		return nil, nil, err
	}
	return cli, ms, nil
}

// findMember finds replica's member of cluster in ms: by its member name,
// or, when its address is known, by its peer URL (a learner that has not
// started has no name yet).
func (d *Deps) findMember(ms []etcdmember.Member, cluster, replica, address string) (etcdmember.Member, bool) {
	name, peer := d.Flavor().EtcdMember(cluster, replica, address)
	if address == "" {
		peer = ""
	}
	return providers.FindMember(ms, name, peer)
}

// clusterMembers lists etcd cluster's members, reached through replicas
// other than those in exclude.
func (d *Deps) clusterMembers(ctx context.Context, cluster string, exclude ...string) ([]etcdmember.Member, error) {
	cli, ms, err := d.etcdMembers(ctx, cluster, exclude, func(err error) error { return fmt.Errorf("etcd %s members: %w", cluster, err) })
	if err != nil {
		return nil, err
	}
	cli.Close()
	return ms, nil
}

// replicaOf is the replica among rs that member m of cluster belongs to,
// or "" (an orphan, or a learner whose VM does not exist).
func (d *Deps) replicaOf(m etcdmember.Member, cluster string, rs []providers.Replica) string {
	for _, rep := range rs {
		if _, ok := d.findMember([]etcdmember.Member{m}, cluster, rep.Name, rep.Address); ok {
			return rep.Name
		}
	}
	return ""
}

// Options control how Execute runs a workflow.
type Options struct {
	DryRun bool
	// Confirm is called with the plan before anything changes; an error
	// aborts (the CLI asks on a terminal, or refuses without --yes).
	Confirm func(plan string) error
	// Supersede decides whether an unfinished journal of another workflow
	// may be replaced by this one.
	Supersede func(prev, next *Journal) bool
	// LockExclude names replicas the lock's etcd connection must avoid.
	LockExclude []string
	// SoleReplicaOutage: the run may replace the cluster's only replica
	// (rolling-upgrade --allow-downtime). When the cluster has one
	// replica, its steps are fenced by outageFence: while its etcd is
	// down the lock cannot be proven, and the run goes on (to its
	// rollback, if the replacement does not come back).
	SoleReplicaOutage bool
	// Defaults fills parameters still empty after a resume was considered
	// (a fresh run's generated replica name); an error refuses the run
	// before anything changes.
	Defaults func(params map[string]string) error
	// ShowPlan, when set, receives the plan document of a dry run instead
	// of the text plan on Deps.Out (--output json).
	ShowPlan func(PlanDoc) error
}

// Execute prepares wf against the journal, prints the plan on a dry run,
// confirms, adopts another tool's master 0 when the provider can
// (StepAdopt), takes the cluster lock and runs it.
func Execute(ctx context.Context, d *Deps, wf *Workflow, o Options) (err error) {
	if err := d.checkBound(); err != nil {
		return err
	}
	runID := NewRunID()
	sink := d.Sink
	if sink == nil {
		sink = Discard{}
	}
	rn := &Runner{Store: NewJournalStore(d.StateDir, d.Cluster), Sink: Stamp(sink, wf.Name, runID, nil), AfterStep: d.AfterStep, Heartbeat: d.Heartbeat,
		BeforeChange: d.recordFlavor}
	// Nested workflows (a surge upgrade's add and remove) report under
	// this run too.
	d.Sink = rn.Sink
	defer func() { d.Sink = sink }()
	j, resumed, err := rn.Prepare(wf, o.Supersede)
	if err != nil {
		return err
	}
	if o.Defaults != nil {
		if err := o.Defaults(wf.Params); err != nil {
			return err
		}
	}
	if proceed, err := d.present(wf, j, resumed, o); err != nil || !proceed {
		return err
	}
	started := time.Now()
	d.logger().Info("run", "workflow", wf.Name, "run_id", runID, "params", wf.Params, "resumed", resumed)
	if err := d.adopt(ctx, rn.Sink); err != nil {
		return err
	}
	if err := wf.check(ctx); err != nil {
		return err
	}
	cli, err := d.Etcd(ctx, o.LockExclude...)
	if err != nil {
		return errkind.Errorf(errkind.FailedPrecondition, "take cluster lock: %w", err)
	}
	defer cli.Close()
	lock, err := d.takeLock(ctx, cli.Raw())
	if err != nil {
		return err
	}
	// A run is history once it holds the lock: one refused before (bad
	// input, a failed check, another operator's lock) changed nothing.
	defer func() {
		rec := d.historyRecord(runID, wf, j, resumed, started, time.Now(), err)
		if herr := AppendHistory(d.StateDir, d.Cluster, rec); herr != nil {
			d.logger().Warn("history not recorded", "error", herr)
		}
		d.logger().Info("run ended", "workflow", wf.Name, "run_id", runID, "result", rec.Result, "error", rec.Error)
	}()
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = lock.Release(rctx)
	}()
	lock.exclude = o.LockExclude
	return d.runFenced(ctx, rn, wf, j, lock, o.SoleReplicaOutage)
}

// present shows wf's plan (as a document or text on a dry run, which
// ends there) and asks for the confirmation; proceed says whether to run.
func (d *Deps) present(wf *Workflow, j *Journal, resumed bool, o Options) (proceed bool, err error) {
	plan := wf.Plan()
	if resumed {
		plan += fmt.Sprintf("Resuming the unfinished run started %s (last: %s).\n", j.Started.Format(time.RFC3339), lastStep(j))
	}
	if o.DryRun && o.ShowPlan != nil {
		doc := wf.Doc(d.Cluster, d.Provider.Name(), j, resumed)
		doc.DryRun = true
		return false, o.ShowPlan(doc)
	}
	if o.DryRun {
		fmt.Fprint(d.Out, plan)
		fmt.Fprintln(d.Out, "Dry run: nothing was changed.")
		return false, nil
	}
	if o.Confirm != nil {
		if err := o.Confirm(plan); err != nil {
			return false, err
		}
	}
	return true, nil
}

// takeLock takes the cluster lock through cli.
func (d *Deps) takeLock(ctx context.Context, cli *clientv3.Client) (*Lock, error) {
	lock, err := AcquireLock(ctx, cli, d.Cluster, d.Holder)
	if err != nil {
		return nil, err
	}
	// Seen twice under heavy load (a 5-replica local cluster, a CI run of
	// everything at once): the lock key no longer bound to the lease just
	// taken, at the check before the first step. Nothing of this run has
	// happened yet, so taking the lock again is a fresh start, not a
	// broken fence; a second loss stops the run as ever.
	if cerr := lock.Check(ctx); errors.Is(cerr, ErrLockLost) {
		d.logger().Warn("cluster lock lost right after it was taken; taking it again", "error", cerr, "holder", lockHolder(ctx, cli, d.Cluster))
		lock.Abandon()
		return AcquireLock(ctx, cli, d.Cluster, d.Holder)
	}
	return lock, nil
}

// runFenced runs wf's steps fenced by the lock: a step runs only while
// the lock is held. A sole replica's outage (soleOutage, on a cluster of
// one) takes etcd away with the lock's session, so there the fence is
// the outage fence instead, which waits the outage out.
func (d *Deps) runFenced(ctx context.Context, rn *Runner, wf *Workflow, j *Journal, lock *Lock, soleOutage bool) error {
	if soleOutage {
		if rs, err := d.Provider.Instances().List(ctx); err == nil && len(rs) == 1 {
			f := &outageFence{lock: lock, cluster: d.Cluster, holder: d.Holder, log: d.logger(), probe: 10 * time.Second,
				dial: func(ctx context.Context) (*clientv3.Client, func() error, error) {
					c, err := d.Etcd(ctx)
					if err != nil {
						return nil, nil, err
					}
					return c.Raw(), c.Close, nil
				}}
			// Not fenced by the session: it ends with the outage.
			rn.Fence = f.Check
			d.fence = f.Check
			return rn.Execute(ctx, wf, j)
		}
	}
	fctx, stop := fenced(ctx, lock)
	defer stop()
	rn.Fence = lock.Check
	d.fence = lock.Check
	return rn.Execute(fctx, wf, j)
}
