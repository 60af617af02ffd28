package awstest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// Call is one API request seen by the proxy.
type Call struct {
	Service string // ec2, elasticloadbalancing, route53
	Action  string
	Params  url.Values // form parameters of query-protocol calls
	Path    string
	Status  int
	Fault   string // the injected fault, if any
}

// Fault kinds.
const (
	FaultThrottle = "throttle" // RequestLimitExceeded (EC2) / Throttling
	Fault5xx      = "5xx"      // 500 InternalError
)

type rule struct {
	action string
	kind   string
	left   int
}

// Proxy is a reverse proxy in front of moto that records every call,
// injects faults on a schedule set by the test, and adds what moto does
// not model: a new instance invisible to Describe calls for a while,
// Route53 changes PENDING before INSYNC, and the NLB's states and timing
// (nlb.go): an NLB provisioning before active, its subnet mappings'
// Elastic IPs, targets initial until the data plane's health checks pass
// the healthy threshold at the target group's interval, unused in a zone
// the NLB does not cover, draining for the deregistration delay. The data
// plane (VMs) reads that model, never a recorded request.
type Proxy struct {
	URL string

	mu       sync.Mutex
	calls    []Call
	rules    []*rule
	invisN   int
	invis    map[string]int // instance ID → Describe calls still answered NotFound
	pendingN int
	pending  map[string]int // change ID → GetChange calls still PENDING
	health   func(instanceID string) (state, reason, desc string)
	// The NLB model (nlb.go): AWS's states and timing, which moto lacks.
	timing Timing
	lbs    map[string]*nlbModel // by ARN
	tgs    map[string]*tgModel  // by ARN
	zoneOf func(instanceID string) string
	// What moto drops from a launch (ec2model.go).
	credits map[string]string // instance ID → CPU credits
	groups  map[string]string // instance ID → placement group
	direct  *ec2.Client       // moto itself, for the launch fix-ups
	// onChange is told of every successful call that may change the
	// world (SetOnChange); it must not block.
	onChange func()
	// console answers GetConsoleOutput from the data plane (SetConsole).
	console func(instanceID string) (string, bool)
	// assignedNet is where NLBs' AWS-assigned addresses come from
	// (SetAssignedNet; default AssignedNet).
	assignedNet string
	// Instances' auto-assigned public addresses (SetPublicPool): moto's
	// (54.214.x.y) → the pool's, assigned in order of first sight.
	pubPool []string
	pubMap  map[string]string
	// Served counts what the proxy added: "invisible", "PENDING" and the
	// target states it reported ("healthy", "initial", "unhealthy").
	served map[string]int
}

// NewProxy starts the proxy in front of target, playing AWS's NLB timing
// scaled by timing.
func NewProxy(t testing.TB, target string, timing Timing) *Proxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{invis: map[string]int{}, pending: map[string]int{}, served: map[string]int{}, timing: timing, lbs: map[string]*nlbModel{}, tgs: map[string]*tgModel{}, credits: map[string]string{}, groups: map[string]string{}}
	p.direct = ec2.NewFromConfig(aws.Config{Region: Region, Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", ""), BaseEndpoint: aws.String(target), Retryer: MotoRetryer})
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = p.modify
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		c := classify(r, body)
		if f, ok := p.fault(&c); ok {
			c.Fault, c.Status = f.kind, f.status
			p.record(c)
			w.Header().Set("Content-Type", "text/xml")
			w.WriteHeader(f.status)
			_, _ = w.Write([]byte(f.body))
			return
		}
		r.Header.Set("X-Awstest-Call", fmt.Sprint(p.record(c)))
		rp.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

var credScope = regexp.MustCompile(`Credential=[^/]+/[^/]+/[^/]+/([^/]+)/`)

func classify(r *http.Request, body []byte) Call {
	c := Call{Path: r.URL.Path}
	if m := credScope.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		c.Service = m[1]
	}
	if c.Service == "route53" {
		switch {
		case strings.HasSuffix(r.URL.Path, "/rrset") && r.Method == http.MethodPost, strings.HasSuffix(r.URL.Path, "/rrset/") && r.Method == http.MethodPost:
			c.Action = "ChangeResourceRecordSets"
		case strings.HasSuffix(r.URL.Path, "/rrset") || strings.HasSuffix(r.URL.Path, "/rrset/"):
			c.Action = "ListResourceRecordSets"
		case strings.Contains(r.URL.Path, "/change/"):
			c.Action = "GetChange"
		default:
			c.Action = r.Method + " " + r.URL.Path
		}
		return c
	}
	if v, err := url.ParseQuery(string(body)); err == nil {
		c.Params = v
		c.Action = v.Get("Action")
	}
	return c
}

func (p *Proxy) record(c Call) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c)
	return len(p.calls) - 1
}

type injected struct {
	kind   string
	status int
	body   string
}

func errorBody(service, code, msg string) string {
	if service == "ec2" {
		return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>injected</RequestID></Response>`, code, msg)
	}
	ns := "http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/"
	if service == "route53" {
		ns = "https://route53.amazonaws.com/doc/2013-04-01/"
	}
	return fmt.Sprintf(`<ErrorResponse xmlns="%s"><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>injected</RequestId></ErrorResponse>`, ns, code, msg)
}

func (p *Proxy) fault(c *Call) (injected, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Action == "DescribeInstances" {
		for k, v := range c.Params {
			if strings.HasPrefix(k, "InstanceId.") && len(v) == 1 && p.invis[v[0]] > 0 {
				p.invis[v[0]]--
				p.served["invisible"]++
				return injected{"invisible", 400, errorBody("ec2", "InvalidInstanceID.NotFound", fmt.Sprintf("The instance ID '%s' does not exist", v[0]))}, true
			}
		}
	}
	for _, r := range p.rules {
		if r.left <= 0 || (r.action != "*" && r.action != c.Action) {
			continue
		}
		r.left--
		switch r.kind {
		case FaultThrottle:
			if c.Service == "ec2" {
				return injected{r.kind, 503, errorBody("ec2", "RequestLimitExceeded", "Request limit exceeded.")}, true
			}
			return injected{r.kind, 400, errorBody(c.Service, "Throttling", "Rate exceeded")}, true
		default:
			return injected{r.kind, 500, errorBody(c.Service, "InternalError", "injected internal error")}, true
		}
	}
	return injected{}, false
}

// Inject makes the next n calls of action ("*": any) fail with kind.
func (p *Proxy) Inject(action, kind string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &rule{action: action, kind: kind, left: n})
}

// InvisibleAfterRun makes every instance RunInstances returns answer
// InvalidInstanceID.NotFound to its next n DescribeInstances-by-ID calls,
// as EC2's eventual consistency does.
func (p *Proxy) InvisibleAfterRun(n int) {
	p.mu.Lock()
	p.invisN = n
	p.mu.Unlock()
}

// PendingChanges makes every Route53 change answer PENDING to its first n
// GetChange calls.
func (p *Proxy) PendingChanges(n int) {
	p.mu.Lock()
	p.pendingN = n
	p.mu.Unlock()
}

// SetOnChange makes the proxy call f (which must not block) after every
// successful call that may change the world (not Describe*, Get*,
// List*): a data plane reacts at once instead of at its next poll, as
// EC2 applies an address association within moments.
func (p *Proxy) SetOnChange(f func()) {
	p.mu.Lock()
	p.onChange = f
	p.mu.Unlock()
}

func readOnly(action string) bool {
	for _, pre := range []string{"Describe", "Get", "List"} {
		if strings.HasPrefix(action, pre) {
			return true
		}
	}
	return false
}

// SetConsole makes GetConsoleOutput answer what f says about an instance
// (moto answers a fixed sample): the data plane's boot log.
func (p *Proxy) SetConsole(f func(instanceID string) (string, bool)) {
	p.mu.Lock()
	p.console = f
	p.mu.Unlock()
}

// SetAssignedNet makes the NLBs' AWS-assigned addresses prefix+<10+k>
// (prefix like "198.18.7."): a data plane puts them where the operator
// can reach them.
func (p *Proxy) SetAssignedNet(prefix string) {
	p.mu.Lock()
	p.assignedNet = prefix
	p.mu.Unlock()
}

// SetPublicPool makes the public addresses EC2 assigns instances
// (--associate-public-ip-address; moto draws them from 54.214.0.0/16)
// come from pool instead, in every EC2 answer: a data plane routes them
// to the operator's namespace.
func (p *Proxy) SetPublicPool(pool []string) {
	p.mu.Lock()
	p.pubPool, p.pubMap = append([]string(nil), pool...), map[string]string{}
	p.mu.Unlock()
}

// PublicIP is the pool address standing for moto's public address ip
// (ip itself when it is not one of moto's, or without a pool), for a
// data plane that reads moto directly.
func (p *Proxy) PublicIP(ip string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.publicIP(ip)
}

// publicIP: called with p.mu held.
func (p *Proxy) publicIP(ip string) string {
	if p.pubMap == nil || !motoPublicRE.MatchString(ip) {
		return ip
	}
	if v, ok := p.pubMap[ip]; ok {
		return v
	}
	if len(p.pubPool) == 0 {
		return ip // exhausted: the address stays unroutable
	}
	v := p.pubPool[0]
	p.pubPool = p.pubPool[1:]
	p.pubMap[ip] = v
	return v
}

// SetHealth sets where the health of a registered target in an enabled
// zone of an active NLB comes from (the data plane's health checks), and
// where instances' zones come from.
func (p *Proxy) SetHealth(f func(instanceID string) (state, reason, desc string), zoneOf func(instanceID string) string) {
	p.mu.Lock()
	p.health, p.zoneOf = f, zoneOf
	p.mu.Unlock()
}

var (
	consoleOutputRE = regexp.MustCompile(`(?s)<output>.*?</output>`)
	// motoPublicRE matches moto's auto-assigned public addresses
	// (moto.ec2.utils.random_public_ip).
	motoPublicRE  = regexp.MustCompile(`\b54\.214\.\d{1,3}\.\d{1,3}\b`)
	instanceIDRE  = regexp.MustCompile(`<instanceId>(i-[0-9a-f]+)</instanceId>`)
	changeIDRE    = regexp.MustCompile(`<Id>([^<]+)</Id>`)
	memberRE      = regexp.MustCompile(`(?s)<member>.*?</member>`)
	targetIDRE    = regexp.MustCompile(`<Target>\s*<Id>(i-[0-9a-f]+)</Id>`)
	healthBlockRE = regexp.MustCompile(`(?s)<TargetHealth>.*?</TargetHealth>`)
)

func (p *Proxy) modify(resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte("<RunInstancesResponse")) {
		p.launchFixups(p.callParams(resp.Request), string(body))
	}
	out := p.rewrite(resp.Request, body, resp.StatusCode)
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Del("Content-Length")
	resp.Header.Set("Content-Length", fmt.Sprint(len(out)))
	return nil
}

// callParams are the recorded parameters of the call r forwards.
func (p *Proxy) callParams(r *http.Request) url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, err := strconv.Atoi(r.Header.Get("X-Awstest-Call")); err == nil && i < len(p.calls) {
		return p.calls[i].Params
	}
	return nil
}

func (p *Proxy) rewrite(r *http.Request, body []byte, status int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var call Call
	if i, err := strconv.Atoi(r.Header.Get("X-Awstest-Call")); err == nil && i < len(p.calls) {
		p.calls[i].Status = status
		call = p.calls[i]
	}
	if status != http.StatusOK {
		return body
	}
	s := string(body)
	if p.onChange != nil && !readOnly(call.Action) {
		p.onChange()
	}
	if call.Service == "elasticloadbalancing" {
		p.learn(call.Action, call.Params, s)
	}
	if call.Service == "ec2" && p.pubMap != nil {
		s = motoPublicRE.ReplaceAllStringFunc(s, p.publicIP)
	}
	switch {
	case bytes.Contains(body, []byte("<DescribeInstancesResponse")) && len(p.groups) > 0:
		s = p.rewritePlacement(s)
	case bytes.Contains(body, []byte("<DescribeInstanceCreditSpecificationsResponse")):
		s = p.rewriteCredits(s)
	case bytes.Contains(body, []byte("<DescribeLoadBalancersResponse")):
		s = p.rewriteLBs(s)
	case bytes.Contains(body, []byte("<RunInstancesResponse")):
		for _, m := range instanceIDRE.FindAllStringSubmatch(s, -1) {
			if p.invisN > 0 {
				p.invis[m[1]] = p.invisN
			}
		}
	case bytes.Contains(body, []byte("<ChangeResourceRecordSetsResponse")):
		if m := changeIDRE.FindStringSubmatch(s); m != nil && p.pendingN > 0 {
			p.pending[strings.TrimPrefix(m[1], "/change/")] = p.pendingN
		}
	case bytes.Contains(body, []byte("<GetChangeResponse")):
		if m := changeIDRE.FindStringSubmatch(s); m != nil {
			id := strings.TrimPrefix(m[1], "/change/")
			if p.pending[id] > 0 {
				p.pending[id]--
				p.served["PENDING"]++
				s = strings.Replace(s, "<Status>INSYNC</Status>", "<Status>PENDING</Status>", 1)
			}
		}
	case bytes.Contains(body, []byte("<DescribeTargetHealthResponse")):
		s = p.rewriteTargetHealth(call.Params, s)
	case bytes.Contains(body, []byte("<GetConsoleOutputResponse")) && p.console != nil:
		if out, ok := p.console(call.Params.Get("InstanceId")); ok {
			s = consoleOutputRE.ReplaceAllLiteralString(s, "<output>"+base64.StdEncoding.EncodeToString([]byte(out))+"</output>")
			p.served["console"]++
		}
	}
	return []byte(s)
}

// rewriteTargetHealth reports AWS's target states: a target moto lists as
// registered is initial / healthy / unhealthy / unused as targetHealth
// says; a deregistered one is draining for the deregistration delay (moto
// forgets it at once). Called with p.mu held.
func (p *Proxy) rewriteTargetHealth(params url.Values, s string) string {
	tgARN := params.Get("TargetGroupArn")
	tg := p.tgs[tgARN]
	now := time.Now()
	draining := map[string]bool{}
	if tg != nil {
		for id, until := range tg.draining {
			if now.Before(until) {
				draining[id] = true
			} else {
				delete(tg.draining, id)
			}
		}
	}
	th := func(state, reason, desc string) string {
		p.served[state]++
		out := "<TargetHealth><State>" + state + "</State>"
		if reason != "" {
			out += "<Reason>" + reason + "</Reason><Description>" + xmlEscape(desc) + "</Description>"
		}
		return out + "</TargetHealth>"
	}
	listed := map[string]bool{}
	s = memberRE.ReplaceAllStringFunc(s, func(m string) string {
		id := targetIDRE.FindStringSubmatch(m)
		if id == nil {
			return m
		}
		listed[id[1]] = true
		switch {
		case draining[id[1]]:
			return healthBlockRE.ReplaceAllLiteralString(m, th("draining", "Target.DeregistrationInProgress", "Target deregistration is in progress"))
		case strings.Contains(m, "<State>healthy</State>"): // moto: registered
			return healthBlockRE.ReplaceAllLiteralString(m, th(p.targetHealth(tgARN, id[1])))
		}
		return m
	})
	filter := targetIDs(params)
	var add strings.Builder
	for id := range draining {
		if listed[id] || (len(filter) > 0 && !slices.Contains(filter, id)) {
			continue
		}
		add.WriteString("<member><Target><Id>" + id + "</Id></Target>" + th("draining", "Target.DeregistrationInProgress", "Target deregistration is in progress") + "</member>")
	}
	if add.Len() > 0 {
		if strings.Contains(s, "<TargetHealthDescriptions/>") {
			s = strings.Replace(s, "<TargetHealthDescriptions/>", "<TargetHealthDescriptions>"+add.String()+"</TargetHealthDescriptions>", 1)
		} else {
			s = strings.Replace(s, "</TargetHealthDescriptions>", add.String()+"</TargetHealthDescriptions>", 1)
		}
	}
	return s
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Calls returns the calls recorded so far.
func (p *Proxy) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}

// Mark returns the number of calls so far, for CountsSince.
func (p *Proxy) Mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// CountsSince counts calls by action since mark.
func (p *Proxy) CountsSince(mark int) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for _, c := range p.calls[mark:] {
		m[c.Action]++
	}
	return m
}

// FormatCounts renders counts as "total N: A×n, B×m".
func FormatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	total := 0
	for k, v := range m {
		keys = append(keys, k)
		total += v
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return fmt.Sprintf("total %d: %s", total, strings.Join(parts, ", "))
}

// Last returns the last recorded successful call of action.
func (p *Proxy) Last(action string) (Call, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.calls) - 1; i >= 0; i-- {
		if c := p.calls[i]; c.Action == action && c.Fault == "" && c.Status == http.StatusOK {
			return c, true
		}
	}
	return Call{}, false
}

// Served returns how often the proxy served each added behaviour.
func (p *Proxy) Served() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for k, v := range p.served {
		m[k] = v
	}
	return m
}

// Faults counts the injected faults by kind.
func (p *Proxy) Faults() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for _, c := range p.calls {
		if c.Fault != "" {
			m[c.Fault]++
		}
	}
	return m
}

// MotoRetryer is the retryer of the test bed's own clients (kube-up's
// side, the proxy's reads of moto): ten attempts, as the provider's
// --aws-max-attempts in the suite. moto 5.2's response serializer
// iterates a dict other request threads change, and under concurrent
// requests it answers 500 ("dictionary changed size during iteration")
// several times running; a real EC2 endpoint's 5xx are retried as well.
func MotoRetryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 10 })
}
