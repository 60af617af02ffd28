package bench

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/providers/local"
)

// Profile is the timing of a cloud, played by the local provider: how long
// a replica's VM takes to come back, and how the load balancer's health
// checks decide that a target is up or down. The local LB keeps sending new
// connections to a target until UnhealthyThreshold consecutive checks, one
// every HealthInterval, have failed, and takes a (new or restarted) target
// back after HealthyThreshold passing ones: exactly the window in which a
// cloud LB routes clients to a replica that is already gone.
//
// Profiles are opt-in: only the benchmark applies them (through the local
// provider's timing options); the provider's default, and every test, keep
// the instant timing.
type Profile struct {
	Name string
	// BootDelay is the time between asking for a (re)created VM and its
	// process starting.
	BootDelay time.Duration
	// HealthInterval, HealthTimeout, HealthyThreshold and
	// UnhealthyThreshold are the LB's health check settings.
	HealthInterval     time.Duration
	HealthTimeout      time.Duration
	HealthyThreshold   int
	UnhealthyThreshold int
	// PassThrough: a connection sent to a target that refuses it fails;
	// the LB does not try another target (GCE's network LB and AWS's NLB
	// forward packets, they do not proxy and retry).
	PassThrough bool
	// LBProvisioning is how long a new load balancer takes before it
	// forwards anything (the first add's promotion of the static IP).
	LBProvisioning time.Duration
}

// profiles are the known timing profiles, by name.
//
// gce: a regional backend service's HTTPS health check with the defaults of
// `gcloud compute health-checks create https` (check interval 5 s, timeout
// 5 s, healthy threshold 2, unhealthy threshold 2;
// https://cloud.google.com/load-balancing/docs/health-check-concepts#default_health_check_settings
// and the gcloud reference of health-checks create). A recreated instance
// (delete + insert from its template, then the guest boots and runs its
// startup script) comes back after 30–90 s in practice; we take 60 s.
//
// aws: an NLB target group's HTTPS health check with the API defaults of
// elbv2 CreateTargetGroup for TCP/TLS/HTTPS target groups (interval 30 s —
// 10 s is the other allowed value —, timeout 10 s, healthy threshold 5,
// unhealthy threshold 2;
// https://docs.aws.amazon.com/elasticloadbalancing/latest/network/target-group-health-checks.html).
// We take the healthy threshold 5, the API default hamaster gets since it
// does not set one, not the 3 the newer console proposes: what matters is
// what a target group created by a tool gets. So a registered target
// receives traffic only after 5 × 30 s = 150 s of passing checks, which is
// also how the registration delay ("initial" state) shows here. The
// deregistration delay (300 s by default) only keeps existing connections
// of a draining target; the load sends every request on a new connection,
// so it is not modelled. An EC2 instance replaced from its launch template
// is back in 30–90 s; we take 60 s. A new NLB stays "provisioning" before
// "active" (DescribeLoadBalancers State.Code); AWS documents no duration,
// and minutes are usual: we take 180 s.
//
// For gce, the forwarding rule's operation is done once it is programmed,
// and no extra provisioning time is modelled: the first add's wait is the
// health checks'.
//
// instant: the local provider's own timing (no boot delay, a check every
// 100 ms, healthy after 1 pass, unhealthy after 2 failures, a refused
// connection retried on another target).
var profiles = map[string]Profile{
	"instant": {Name: "instant", HealthInterval: 100 * time.Millisecond, HealthTimeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: 2},
	"gce":     {Name: "gce", BootDelay: 60 * time.Second, HealthInterval: 5 * time.Second, HealthTimeout: 5 * time.Second, HealthyThreshold: 2, UnhealthyThreshold: 2, PassThrough: true},
	"aws":     {Name: "aws", BootDelay: 60 * time.Second, HealthInterval: 30 * time.Second, HealthTimeout: 10 * time.Second, HealthyThreshold: 5, UnhealthyThreshold: 2, PassThrough: true, LBProvisioning: 180 * time.Second},
}

// Scaled returns p with every duration multiplied by f (thresholds, which
// are counts, are kept): a profile shrunk for a short run goes through the
// same states in the same order, only faster.
func (p Profile) Scaled(f float64) Profile {
	s := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	p.BootDelay = s(p.BootDelay)
	p.HealthInterval = s(p.HealthInterval)
	p.HealthTimeout = s(p.HealthTimeout)
	p.LBProvisioning = s(p.LBProvisioning)
	return p
}

// ProviderOptions are the local provider's timing options for p.
func (p Profile) ProviderOptions() map[string]string {
	return map[string]string{
		local.OptBootDelay:            p.BootDelay.String(),
		local.OptLBHealthInterval:     p.HealthInterval.String(),
		local.OptLBHealthTimeout:      p.HealthTimeout.String(),
		local.OptLBHealthyThreshold:   strconv.Itoa(p.HealthyThreshold),
		local.OptLBUnhealthyThreshold: strconv.Itoa(p.UnhealthyThreshold),
		local.OptLBNoDialRetry:        strconv.FormatBool(p.PassThrough),
		local.OptLBProvisionDelay:     p.LBProvisioning.String(),
	}
}

// StepTimeout bounds one workflow wait for a replica to come back healthy
// behind the LB: its boot, a full healthy streak, and a minute of margin.
func (p Profile) StepTimeout() time.Duration {
	return time.Minute + 2*(p.BootDelay+p.LBProvisioning+time.Duration(p.HealthyThreshold+1)*p.HealthInterval)
}

// profileFromEnv reads HAMASTER_BENCH_PROFILE (default instant) and
// HAMASTER_BENCH_SCALE (a factor in (0, 1], default 1) and returns the
// scaled profile and the scale.
func profileFromEnv() (Profile, float64, error) {
	name := os.Getenv("HAMASTER_BENCH_PROFILE")
	if name == "" {
		name = "instant"
	}
	p, ok := profiles[name]
	if !ok {
		return Profile{}, 0, fmt.Errorf("HAMASTER_BENCH_PROFILE=%q: want instant, gce or aws", name)
	}
	scale := 1.0
	if v := os.Getenv("HAMASTER_BENCH_SCALE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			return Profile{}, 0, fmt.Errorf("HAMASTER_BENCH_SCALE=%q: want a factor in (0, 1] such as 0.05", v)
		}
		scale = f
	}
	if name == "instant" {
		return p, scale, nil // already as fast as the local machine is
	}
	return p.Scaled(scale), scale, nil
}

// controlPlane is what serves the API in the benchmark's replicas: the
// stand-in (hamaster-node's own apiserver, /readyz and /kv on etcd: quick)
// or the real kube-apiserver 'make kube-apiserver' built.
type controlPlane struct {
	// Name is nodeapi.ControlPlaneStandin or nodeapi.ControlPlaneReal.
	Name string
	// Dir holds the real binaries by version.
	Dir string
	// From and To are the versions the upgrade goes from and to ("" From:
	// the stand-in's default).
	From, To string
}

func (c controlPlane) real() bool { return c.Name == nodeapi.ControlPlaneReal }

// controlPlaneFromEnv reads HAMASTER_BENCH_CONTROL_PLANE (standin, the
// default, or real) and, for real, the binaries' directory
// HAMASTER_REAL_APISERVER_DIR (default: where make kube-apiserver puts
// them), checking both versions are built.
func controlPlaneFromEnv() (controlPlane, error) {
	switch v := os.Getenv("HAMASTER_BENCH_CONTROL_PLANE"); v {
	case "", nodeapi.ControlPlaneStandin:
		return controlPlane{Name: nodeapi.ControlPlaneStandin, To: "v1.31.0"}, nil
	case nodeapi.ControlPlaneReal:
	default:
		return controlPlane{}, fmt.Errorf("HAMASTER_BENCH_CONTROL_PLANE=%q: want %s or %s", v, nodeapi.ControlPlaneStandin, nodeapi.ControlPlaneReal)
	}
	c := controlPlane{Name: nodeapi.ControlPlaneReal, Dir: os.Getenv("HAMASTER_REAL_APISERVER_DIR"), From: "v1.33.13", To: "v1.34.4"}
	if c.Dir == "" {
		d, err := nodeapi.DefaultKubeAPIServerDir()
		if err != nil {
			return controlPlane{}, fmt.Errorf("real control plane: %w", err)
		}
		c.Dir = d
	}
	for _, v := range []string{c.From, c.To} {
		if _, err := os.Stat(nodeapi.KubeAPIServerPath(c.Dir, v)); err != nil {
			return controlPlane{}, fmt.Errorf("real control plane: no kube-apiserver %s in %s (run make kube-apiserver): %w", v, c.Dir, err)
		}
	}
	return c, nil
}
