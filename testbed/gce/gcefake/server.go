// Package gcefake is a wire-level fake of the Compute Engine and Cloud DNS
// REST APIs hamaster's GCE provider uses, so that the real Google client
// libraries (cloud.google.com/go/compute/apiv1, google.golang.org/api/dns/v1)
// run against it unchanged (option.WithEndpoint(s.URL),
// option.WithoutAuthentication()).
//
// What it models:
//   - routing and request bodies from the discovery documents shipped in
//     google.golang.org/api: an unknown method is a 404, an unknown or
//     mistyped field a 400, as on the real API;
//   - long-running operations: every mutation returns an Operation that is
//     PENDING, then RUNNING, then DONE after its latency (SetLatency);
//     the effect is applied when it is DONE; operations.get answers the
//     current state and operations.wait blocks until DONE (or 2 minutes);
//     a repeated requestId returns the first call's operation;
//   - Google's error JSON (404 notFound, 409 alreadyExists, 412
//     conditionNotMet, 400 resourceInUseByAnotherResource, 429
//     rateLimitExceeded, 503 backendError) and a per-call fault schedule
//     (SetFaults);
//   - a data plane: booting an instance starts `hamaster-node replica` from
//     its kube-env and kube-master-certs metadata, its data directory on its
//     data disk; an access config's natIP is bound by that node; a
//     forwarding rule to a backend service runs `hamaster-node lb` on the
//     rule's IP whose real /readyz checks answer backendServices.getHealth.
//
// Addresses: every IP the fake allocates is a loopback address in
// 127.0.N.0/24 (Options.Subnet): internal addresses 127.0.N.2-127,
// external ones 127.0.N.128-254. Nothing is ever sent to a non-loopback
// address, and the provider needs no address translation.
//
// VPC mode (Options.VPC, see VPCOptions; needs root): instances are
// kube-up masters in a testbed/vpc network-namespace VPC instead. Each
// is a VM namespace at an internal address of the subnetwork (e.g.
// 10.128.0.0/20) running `hamaster-node kube-up-master` booted from its
// kube-env and kube-master-certs metadata (data disk master-pd) and sshd
// on port 22 (keys from the project's and the instance's ssh-keys); access
// configs and the static IP are addresses of the VPC's external range,
// the only ones the operator's namespace reaches; a forwarding rule's
// `hamaster-node lb` runs in the router namespace on the rule's address.
// The fake keeps a known_hosts file for the VMs' external addresses, and
// instances.getSerialPortOutput shows a master's boot log.
//
// kubeadm images (VPCOptions.Kubeadm, see KubeadmOptions): a VM whose boot
// disk comes from one is a kubeadm host instead, kubeadm, kubectl and the
// test bed's kubelet installed and its kubelet service running in the
// VM's own mount namespace (testbed/kubeadmhost); the operator runs
// kubeadm init or join on it over SSH.
package gcefake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hamaster/hamaster/testbed/kubeadmhost"
)

// Options configure a fake.
type Options struct {
	// Project is the only project served ("" = "hamaster-test").
	Project string
	// Subnet is N of the 127.0.N.0/24 every allocated address lives in.
	Subnet int
	// NodeBinary is hamaster-node; "" runs no data plane (instances reach
	// RUNNING but nothing boots, forwarding rules forward nothing).
	NodeBinary string
	// Dir holds the data plane's files (disks, node env files, LB config).
	Dir string
	// HealthInterval is the LB health-check interval the data plane uses
	// instead of the health check's checkIntervalSec (time compression for
	// tests). Default 100ms.
	HealthInterval time.Duration
	// Visibility delays a new resource's appearance in get and list by
	// this long after its insert operation is DONE (eventual
	// consistency; 0: at once).
	Visibility time.Duration
	// APIDir is google.golang.org/api's directory (default: found in the
	// module cache).
	APIDir string
	// Logger receives one line per call at debug level.
	Logger *slog.Logger
	// Addr is where the API listens (default 127.0.0.1:0, a free port).
	Addr string
	// VPC, when set, runs the data plane in a namespace VPC with
	// kube-up masters (see VPCOptions); Subnet is then unused.
	VPC *VPCOptions
}

// Call is one API call, as the fault schedule sees it.
type Call struct {
	// Method is the discovery method id, e.g. "compute.instances.insert".
	Method string
	// Path is the URL path and query.
	Path string
	// Attempt counts calls with the same method and path, from 1.
	Attempt int
}

// Fault is an error the schedule makes a call return instead of handling it.
type Fault struct {
	Code    int    // HTTP status, e.g. 429 or 503
	Reason  string // e.g. "rateLimitExceeded"; default from Code
	Message string
	// InOperation accepts the call and fails its operation instead: it
	// ends DONE with this error (Reason as the error code, e.g.
	// QUOTA_EXCEEDED or ZONE_RESOURCE_POOL_EXHAUSTED) and an insert leaves
	// nothing behind, as Compute reports quota and capacity failures.
	InOperation bool
}

// OpStat is one finished operation's timing.
type OpStat struct {
	Method     string
	Start, End time.Time
}

// Server is a running fake.
type Server struct {
	// URL is the endpoint for option.WithEndpoint (http://127.0.0.1:PORT).
	URL string

	o       Options
	compute *discovery
	dnsDoc  *discovery
	srv     *http.Server
	ln      net.Listener

	mu        sync.Mutex
	res       map[string]map[string]map[string]any // "zones/Z/instances" → name → resource
	ops       map[string]*operation                // op name → op
	requests  map[string]*operation                // requestId → op
	nextID    uint64
	faults    func(Call) *Fault
	latency   func(method string) time.Duration
	attempts  map[string]int
	calls     map[string]int
	opStats   []OpStat
	zones     map[string]*managedZone
	nodes     map[string]*nodeProc // instance key → process
	lbs       map[string]*lbProc   // forwarding rule key → process
	draining  map[string]map[string]string
	vms       map[string]*vpcVM     // instance key → VM (VPC mode)
	extOwners map[netip.Addr]string // external address → instance key or "lb:"+rule key (VPC mode)
	projectMD map[string]any        // the project's commonInstanceMetadata
	closed    bool
	bg        sync.WaitGroup
	closeCtx  context.Context
	closeStop context.CancelFunc
}

// New starts a fake on a loopback port.
func New(o Options) (*Server, error) {
	if o.Project == "" {
		o.Project = "hamaster-test"
	}
	if o.VPC != nil {
		if o.VPC.Net == nil || o.NodeBinary == "" || o.Dir == "" {
			return nil, fmt.Errorf("gcefake: VPC mode needs VPC.Net, NodeBinary and Dir")
		}
		if o.VPC.Kubeadm != nil {
			// The kubeadm VMs see their own /etc/kubernetes, /var/lib/*,
			// /run and /usr/local/bin: the fake's files must not be there.
			abs, err := filepath.Abs(o.Dir)
			if err != nil {
				return nil, fmt.Errorf("gcefake: %w", err)
			}
			for _, m := range kubeadmhost.Mounts() {
				if abs == m || strings.HasPrefix(abs, m+"/") {
					return nil, fmt.Errorf("gcefake: Dir %s is under %s, which every kubeadm VM replaces with its own", abs, m)
				}
			}
		}
		if o.VPC.KnownHosts == "" {
			o.VPC.KnownHosts = filepath.Join(o.Dir, "known_hosts")
		}
		if err := os.WriteFile(o.VPC.KnownHosts, nil, 0o644); err != nil {
			return nil, fmt.Errorf("gcefake: known_hosts: %w", err)
		}
	} else if o.NodeBinary != "" {
		return nil, fmt.Errorf("gcefake: a data plane (NodeBinary) runs only in a VPC (Options.VPC): the fake's masters boot as kube-up's do, in namespaces")
	} else if o.Subnet < 1 || o.Subnet > 254 {
		return nil, fmt.Errorf("gcefake: Subnet %d: want 1-254", o.Subnet)
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = 100 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	dir, err := apiDir(o.APIDir)
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, res: map[string]map[string]map[string]any{}, ops: map[string]*operation{}, requests: map[string]*operation{},
		attempts: map[string]int{}, calls: map[string]int{}, zones: map[string]*managedZone{}, nodes: map[string]*nodeProc{}, lbs: map[string]*lbProc{},
		draining: map[string]map[string]string{}, vms: map[string]*vpcVM{}, extOwners: map[netip.Addr]string{},
		projectMD: map[string]any{"kind": "compute#metadata", "fingerprint": randHex(8)}, latency: func(string) time.Duration { return 20 * time.Millisecond }}
	s.closeCtx, s.closeStop = context.WithCancel(context.Background())
	if s.compute, err = loadDiscovery(dir, "compute/v1/compute-api.json"); err != nil {
		return nil, err
	}
	if s.dnsDoc, err = loadDiscovery(dir, "dns/v1/dns-api.json"); err != nil {
		return nil, err
	}
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	s.URL = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Project is the project the fake serves.
func (s *Server) Project() string { return s.o.Project }

// Close stops the server and every process of the data plane.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	nodes := s.nodes
	lbs := s.lbs
	s.nodes, s.lbs = map[string]*nodeProc{}, map[string]*lbProc{}
	s.mu.Unlock()
	s.closeStop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop() }()
	}
	for _, l := range lbs {
		wg.Add(1)
		go func() { defer wg.Done(); l.Stop() }()
	}
	wg.Wait()
	// Operations still running finish (their boots see s.closed), then
	// every VM goes: its processes, namespace and external address.
	s.bg.Wait()
	s.mu.Lock()
	var vms []string
	for k := range s.vms {
		vms = append(vms, k)
	}
	s.mu.Unlock()
	for _, k := range vms {
		wg.Add(1)
		go func() { defer wg.Done(); s.stopVM(k) }()
	}
	wg.Wait()
	return nil
}

// SetFaults installs the fault schedule: f is asked before every call and
// a non-nil Fault is returned instead of handling it. nil clears it.
func (s *Server) SetFaults(f func(Call) *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.attempts = map[string]int{}
}

// SetLatency sets how long each operation (by method id) takes to be DONE.
func (s *Server) SetLatency(f func(method string) time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = f
}

// Calls returns the number of calls per method id since the last reset
// (faulted calls included).
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.calls))
	for k, v := range s.calls {
		out[k] = v
	}
	return out
}

// OpStats returns the operations finished since the last reset.
func (s *Server) OpStats() []OpStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]OpStat(nil), s.opStats...)
}

// ResetStats clears call counts and operation timings.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = map[string]int{}
	s.opStats = nil
}

// apiError is Google's error, rendered as its JSON.
type apiError struct {
	Code    int
	Reason  string
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Code, e.Reason, e.Message) }

func errf(code int, reason, format string, args ...any) *apiError {
	return &apiError{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func notFound(kind, name string) *apiError {
	return errf(404, "notFound", "The resource '%s' was not found", kind+"/"+name)
}

var statusNames = map[int]string{400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}

func defaultReason(code int) string {
	switch code {
	case 429:
		return "rateLimitExceeded"
	case 503:
		return "backendError"
	case 404:
		return "notFound"
	case 409:
		return "alreadyExists"
	}
	return "badRequest"
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.Reason == "" {
		e.Reason = defaultReason(e.Code)
	}
	domain := "global"
	if e.Code == 429 {
		domain = "usageLimits"
	}
	body := map[string]any{"error": map[string]any{
		"code": e.Code, "message": e.Message, "status": statusNames[e.Code],
		"errors": []any{map[string]any{"message": e.Message, "domain": domain, "reason": e.Reason}},
	}}
	writeJSON(w, e.Code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// request is one routed call.
type request struct {
	method string
	params map[string]string
	query  url.Values
	body   map[string]any
	// opFault fails the call's operation (Fault.InOperation).
	opFault *Fault
}

// ServeHTTP routes by the discovery documents, applies the fault
// schedule, validates the body and dispatches.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, storagePath) {
		s.serveStorage(w, r)
		return
	}
	doc := s.compute
	if strings.HasPrefix(r.URL.Path, "/dns/") {
		doc = s.dnsDoc
	}
	m, params, ok := doc.route(r.Method, r.URL.Path)
	if !ok {
		writeError(w, errf(404, "notFound", "no method for %s %s", r.Method, r.URL.Path))
		return
	}
	key := m.id + " " + r.URL.Path + "?" + r.URL.RawQuery
	s.mu.Lock()
	s.calls[m.id]++
	s.attempts[key]++
	call := Call{Method: m.id, Path: r.URL.RequestURI(), Attempt: s.attempts[key]}
	faults := s.faults
	s.mu.Unlock()
	s.o.Logger.Debug("gcefake call", "method", m.id, "path", r.URL.Path, "attempt", call.Attempt)
	var opFault *Fault
	if faults != nil {
		if f := faults(call); f != nil && f.InOperation {
			opFault = f
		} else if f != nil {
			msg := f.Message
			if msg == "" {
				msg = fmt.Sprintf("injected fault for %s", m.id)
			}
			writeError(w, &apiError{Code: f.Code, Reason: f.Reason, Message: msg})
			return
		}
	}
	if p := params["project"]; p != s.o.Project {
		writeError(w, errf(404, "notFound", "The resource 'projects/%s' was not found", p))
		return
	}
	req := &request{method: m.id, params: params, query: r.URL.Query(), opFault: opFault}
	if m.request != "" {
		b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			writeError(w, errf(400, "badRequest", "read body: %v", err))
			return
		}
		if len(b) > 0 {
			var body map[string]any
			if err := json.Unmarshal(b, &body); err != nil {
				writeError(w, errf(400, "parseError", "Invalid JSON payload received. %v", err))
				return
			}
			if aerr := doc.validate(body, &schema{Ref: m.request}, strings.ToLower(m.request[:1])+m.request[1:]); aerr != nil {
				writeError(w, aerr)
				return
			}
			req.body = body
		}
		if req.body == nil {
			req.body = map[string]any{}
		}
	}
	out, aerr := s.dispatch(r.Context(), req)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, 200, out)
}

func (s *Server) dispatch(ctx context.Context, r *request) (any, *apiError) {
	if strings.HasPrefix(r.method, "dns.") {
		return s.dispatchDNS(r)
	}
	return s.dispatchCompute(ctx, r)
}

// ---- operations ----

type operation struct {
	m      map[string]any
	done   chan struct{}
	start  time.Time
	due    time.Time
	method string
}

// newOp registers an operation for target whose effect runs when its
// latency has passed; the effect's error is recorded on the operation.
// Called with s.mu held.
func (s *Server) newOp(r *request, scope, target, opType string, effect func() *apiError) map[string]any {
	if rid := r.query.Get("requestId"); rid != "" {
		if op, ok := s.requests[rid]; ok {
			return s.opView(op)
		}
	}
	s.nextID++
	name := fmt.Sprintf("operation-%d-%s", s.nextID, randHex(4))
	now := time.Now()
	lat := s.latency(r.method)
	m := map[string]any{
		"kind": "compute#operation", "id": strconv.FormatUint(s.nextID+1000000, 10), "name": name,
		"operationType": opType, "targetLink": s.link(target), "status": "PENDING", "progress": float64(0),
		"insertTime": now.Format(time.RFC3339Nano), "user": "fake@hamaster.invalid",
		"selfLink": s.link(scope + "/operations/" + name),
	}
	if z, ok := strings.CutPrefix(scope, "zones/"); ok {
		m["zone"] = s.link("zones/" + z)
	} else if rg, ok := strings.CutPrefix(scope, "regions/"); ok {
		m["region"] = s.link("regions/" + rg)
	}
	if f := r.opFault; f != nil {
		msg := f.Message
		if msg == "" {
			msg = fmt.Sprintf("injected operation failure for %s", r.method)
		}
		coll, name := target[:max(strings.LastIndex(target, "/"), 0)], lastSeg(target)
		effect = func() *apiError {
			if opType == "insert" {
				s.mu.Lock()
				if it := s.coll(coll)[name]; it != nil {
					scope := coll[:max(strings.LastIndex(coll, "/"), 0)]
					for _, d := range list(it, "_createdDisks") {
						delete(s.coll(scope+"/disks"), d.(string)) // made by this insert: gone with it
					}
				}
				delete(s.coll(coll), name)
				s.mu.Unlock()
			}
			return &apiError{Code: f.Code, Reason: f.Reason, Message: msg}
		}
	} else if opType == "insert" && s.o.Visibility > 0 {
		inner := effect
		effect = func() *apiError {
			s.mu.Lock()
			if it := s.findByLink(target); it != nil {
				it["_visibleAt"] = time.Now().Add(s.o.Visibility).Format(time.RFC3339Nano)
			}
			s.mu.Unlock()
			if inner != nil {
				return inner()
			}
			return nil
		}
	}
	op := &operation{m: m, done: make(chan struct{}), start: now, due: now.Add(lat), method: r.method}
	s.ops[name] = op
	if rid := r.query.Get("requestId"); rid != "" {
		s.requests[rid] = op
	}
	s.after(lat, func() {
		var aerr *apiError
		if effect != nil {
			aerr = effect()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		end := time.Now()
		m["status"] = "DONE"
		m["progress"] = float64(100)
		m["endTime"] = end.Format(time.RFC3339Nano)
		if aerr != nil {
			if aerr.Reason == "" {
				aerr.Reason = defaultReason(aerr.Code)
			}
			m["error"] = map[string]any{"errors": []any{map[string]any{"code": strings.ToUpper(aerr.Reason), "message": aerr.Message}}}
			m["httpErrorStatusCode"] = float64(aerr.Code)
			m["httpErrorMessage"] = statusNames[aerr.Code]
		}
		s.opStats = append(s.opStats, OpStat{Method: op.method, Start: op.start, End: end})
		close(op.done)
	})
	return s.opView(op)
}

// opView is the operation as a client sees it now. Called with s.mu held.
func (s *Server) opView(op *operation) map[string]any {
	v := make(map[string]any, len(op.m)+1)
	for k, x := range op.m {
		v[k] = x
	}
	if v["status"] != "DONE" {
		if time.Since(op.start) > time.Until(op.due) {
			v["status"] = "RUNNING"
			v["startTime"] = op.start.Format(time.RFC3339Nano)
		}
	}
	return v
}

func (s *Server) getOp(ctx context.Context, r *request, wait bool) (any, *apiError) {
	s.mu.Lock()
	op, ok := s.ops[r.params["operation"]]
	s.mu.Unlock()
	if !ok {
		return nil, notFound("operations", r.params["operation"])
	}
	if wait {
		t := time.NewTimer(2 * time.Minute)
		defer t.Stop()
		select {
		case <-op.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opView(op), nil
}

// ---- helpers ----

func (s *Server) link(rel string) string {
	return "https://www.googleapis.com/compute/v1/projects/" + s.o.Project + "/" + rel
}

// coll returns the collection (e.g. "zones/Z/instances"), creating it.
// Called with s.mu held.
func (s *Server) coll(key string) map[string]map[string]any {
	c, ok := s.res[key]
	if !ok {
		c = map[string]map[string]any{}
		s.res[key] = c
	}
	return c
}

// lastSeg is the name at the end of a resource URL or partial path.
func lastSeg(u string) string {
	if i := strings.LastIndex(u, "/"); i >= 0 {
		return u[i+1:]
	}
	return u
}

// relOf turns a full or partial resource URL into "zones/Z/instances/N".
func relOf(u string) string {
	for _, p := range []string{"/zones/", "/regions/", "/global/"} {
		if i := strings.Index(u, p); i >= 0 {
			return u[i+1:]
		}
	}
	return strings.TrimPrefix(u, "/")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func str(m map[string]any, k string) string {
	v, _ := m[k].(string)
	return v
}

func list(m map[string]any, k string) []any {
	v, _ := m[k].([]any)
	return v
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// deepCopy copies a JSON value.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = deepCopy(e)
		}
		return a
	default:
		return v
	}
}

// listView pages a sorted list of resources.
func listView(kind string, items []map[string]any, q url.Values) map[string]any {
	sort.Slice(items, func(i, j int) bool { return str(items[i], "name") < str(items[j], "name") })
	start, _ := strconv.Atoi(q.Get("pageToken"))
	max, _ := strconv.Atoi(q.Get("maxResults"))
	if max <= 0 || max > 500 {
		max = 500
	}
	out := map[string]any{"kind": kind, "id": "list"}
	if start > len(items) {
		start = len(items)
	}
	end := min(start+max, len(items))
	page := make([]any, 0, end-start)
	for _, it := range items[start:end] {
		page = append(page, deepCopy(it))
	}
	if len(page) > 0 {
		out["items"] = page
	}
	if end < len(items) {
		out["nextPageToken"] = strconv.Itoa(end)
	}
	return out
}

// matchFilter supports the filter forms `name = "x"` and
// `labels.k = "v"` (several, ANDed, optionally parenthesised), and
// `field eq "regexp"` / `field ne "regexp"`, where the RE2 expression
// must match the whole value (Compute's list filter, "eq" form).
func matchFilter(filter string, it map[string]any) (bool, *apiError) {
	filter = strings.TrimSpace(filter)
	if filter == "" {
		return true, nil
	}
	if m := eqFilterRE.FindStringSubmatch(filter); m != nil {
		re, err := regexp.Compile("^(?:" + strings.Trim(strings.TrimSpace(m[3]), `"'`) + ")$")
		if err != nil {
			return false, errf(400, "invalid", "Invalid list filter expression %q: %v", filter, err)
		}
		return re.MatchString(fmt.Sprint(it[m[1]])) == (m[2] == "eq"), nil
	}
	for _, part := range splitFilter(filter) {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return false, errf(400, "invalid", "Invalid list filter expression %q", filter)
		}
		k = strings.TrimSpace(k)
		v = strings.Trim(strings.TrimSpace(v), `"`)
		var got string
		if lk, ok := strings.CutPrefix(k, "labels."); ok {
			got = str(obj(it["labels"]), lk)
		} else {
			got = fmt.Sprint(it[k])
		}
		if got != v {
			return false, nil
		}
	}
	return true, nil
}

var eqFilterRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_.]*)\s+(eq|ne)\s+(.+)$`)

func splitFilter(f string) []string {
	var out []string
	for _, p := range strings.Split(f, ")") {
		p = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(p), "("))
		p = strings.TrimSpace(strings.TrimPrefix(p, "AND"))
		p = strings.TrimSpace(strings.TrimPrefix(p, "("))
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Names lists the names of every resource of a collection ("instances",
// "disks", "addresses", "healthChecks", "instanceGroups",
// "backendServices", "forwardingRules") across zones and regions, sorted.
func (s *Server) Names(collection string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for key, c := range s.res {
		if strings.HasSuffix(key, "/"+collection) {
			for n := range c {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Resource returns a copy of the named resource of a collection (as
// Names), searching every zone, region and global scope; nil if absent.
func (s *Server) Resource(collection, name string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, c := range s.res {
		if strings.HasSuffix(key, "/"+collection) || key == collection {
			if it, ok := c[name]; ok {
				return deepCopy(it).(map[string]any)
			}
		}
	}
	return nil
}

// RunningProcesses counts the data plane's live node and LB processes.
func (s *Server) RunningProcesses() (nodes, lbs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.Running() {
			nodes++
		}
	}
	for _, l := range s.lbs {
		if l.Running() {
			lbs++
		}
	}
	return nodes, lbs
}

// after runs f in the background once lat has passed (an operation's or
// a change's latency), or at once when the server closes; Close waits
// for it.
func (s *Server) after(lat time.Duration, f func()) {
	s.bg.Go(func() {
		t := time.NewTimer(lat)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.closeCtx.Done():
		}
		f()
	})
}
