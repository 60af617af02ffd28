package node

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// apiserverOptions are the kube-apiserver flags the stand-in understands.
// Like the real binary, anything else on its command line is fatal.
type apiserverOptions struct {
	Verbosity                   int
	FeatureGates                featureGates
	MaxRequestsInflight         int
	MaxMutatingRequestsInflight int
	AuditLogPath                string
	ShutdownDelay               time.Duration
	AdmissionPlugins            []string
	RequestTimeout              time.Duration
	Profiling                   bool
}

// knownAdmissionPlugins are the kube-apiserver's admission plugin names.
var knownAdmissionPlugins = map[string]bool{
	"AlwaysAdmit": true, "AlwaysDeny": true, "AlwaysPullImages": true,
	"CertificateApproval": true, "CertificateSigning": true, "CertificateSubjectRestriction": true,
	"ClusterTrustBundleAttest": true, "DefaultIngressClass": true, "DefaultStorageClass": true,
	"DefaultTolerationSeconds": true, "DenyServiceExternalIPs": true, "EventRateLimit": true,
	"ExtendedResourceToleration": true, "ImagePolicyWebhook": true, "LimitPodHardAntiAffinityTopology": true,
	"LimitRanger": true, "MutatingAdmissionPolicy": true, "MutatingAdmissionWebhook": true,
	"NamespaceAutoProvision": true, "NamespaceExists": true, "NamespaceLifecycle": true,
	"NodeRestriction": true, "OwnerReferencesPermissionEnforcement": true,
	"PersistentVolumeClaimResize": true, "PersistentVolumeLabel": true, "PodNodeSelector": true,
	"PodSecurity": true, "PodTolerationRestriction": true, "Priority": true, "ResourceQuota": true,
	"RuntimeClass": true, "SecurityContextDeny": true, "ServiceAccount": true,
	"StorageObjectInUseProtection": true, "TaintNodesByCondition": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionWebhook": true,
}

// parseAPIServerArgs parses APISERVER_EXTRA_ARGS the way kube-apiserver
// parses its command line (pflag), so errors read like the real ones:
// "unknown flag: --no-such-flag".
func parseAPIServerArgs(extra string) (apiserverOptions, error) {
	o := apiserverOptions{MaxRequestsInflight: 400, MaxMutatingRequestsInflight: 200, RequestTimeout: time.Minute, Profiling: true}
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&o.Verbosity, "v", 0, "number for the log level verbosity")
	fs.Var(&o.FeatureGates, "feature-gates", "A set of key=value pairs that describe feature gates")
	fs.IntVar(&o.MaxRequestsInflight, "max-requests-inflight", o.MaxRequestsInflight, "maximum number of non-mutating requests in flight")
	fs.IntVar(&o.MaxMutatingRequestsInflight, "max-mutating-requests-inflight", o.MaxMutatingRequestsInflight, "maximum number of mutating requests in flight")
	fs.StringVar(&o.AuditLogPath, "audit-log-path", "", "If set, all requests coming to the apiserver will be logged to this file")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay-duration", 0, "Time to delay the termination, /readyz fails meanwhile")
	fs.StringSliceVar(&o.AdmissionPlugins, "enable-admission-plugins", nil, "admission plugins that should be enabled")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "default request timeout")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "enable profiling")
	if err := fs.Parse(strings.Fields(extra)); err != nil {
		return apiserverOptions{}, err
	}
	if fs.NArg() > 0 {
		return apiserverOptions{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for _, p := range o.AdmissionPlugins {
		if !knownAdmissionPlugins[p] {
			return apiserverOptions{}, fmt.Errorf("enable-admission-plugins plugin %q is unknown", p)
		}
	}
	if o.MaxRequestsInflight < 0 {
		return apiserverOptions{}, fmt.Errorf("--max-requests-inflight can not be negative value")
	}
	if o.MaxMutatingRequestsInflight < 0 {
		return apiserverOptions{}, fmt.Errorf("--max-mutating-requests-inflight can not be negative value")
	}
	if o.ShutdownDelay < 0 {
		return apiserverOptions{}, fmt.Errorf("--shutdown-delay-duration can not be negative value")
	}
	if o.RequestTimeout <= 0 {
		return apiserverOptions{}, fmt.Errorf("--request-timeout must be positive")
	}
	return o, nil
}

// featureGates is a pflag.Value for --feature-gates=Name=true,Other=false.
type featureGates map[string]bool

func (f *featureGates) String() string {
	keys := make([]string, 0, len(*f))
	for k := range *f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+strconv.FormatBool((*f)[k]))
	}
	return strings.Join(parts, ",")
}

func (f *featureGates) Set(v string) error {
	if *f == nil {
		*f = featureGates{}
	}
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		k, val, ok := strings.Cut(s, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return fmt.Errorf("missing bool value for %s", k)
		}
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("invalid value of %s=%s, err: %w", k, val, err)
		}
		(*f)[k] = b
	}
	return nil
}

func (f *featureGates) Type() string { return "mapStringBool" }
