package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

// kubeconfigDescription is the help text of kubeconfig.
const kubeconfigDescription = `Issues a new client certificate and prints a kubeconfig that uses it:
server = the cluster endpoint, CA = the cluster CA. Nothing in the
cluster changes; each run issues a new certificate, valid for
--validity (at most a year: a client certificate cannot be revoked).

Who signs it depends on the cluster's flavor (the one recorded with the
cluster, or found on its masters; no --flavor needed):
  hamaster  the cluster CA under --state-dir signs it here (ECDSA); the
            private key exists only in the output. server = the cluster's
            DNS name when one is recorded, else the static IP (which the
            load balancer owns once there is more than one replica).
  kubeadm   the masters' own CA: 'kubeadm kubeconfig user' runs on a
            running master over SSH with the cluster's ClusterConfiguration,
            so the CA key never leaves the masters (the client key is made
            there and only crosses the SSH session). server = kubeadm-config's
            controlPlaneEndpoint (the VIP:8443 once converted to HA), or the
            single master's own address when none is recorded.

The certificate's CN is the Kubernetes user (--user, kubeadm's
--client-name) and its O fields the groups (--group, kubeadm's --org).
Default group: system:masters for hamaster's masters (cluster-admin);
on kubeadm v1.29+ kubeadm:cluster-admins, the group of kubeadm's own
admin.conf (bound to cluster-admin by a ClusterRoleBinding, so it can be
revoked, unlike system:masters), system:masters before v1.29.
With the local provider this needs 'local up --control-plane real' for
kubectl to find the Kubernetes API: the stand-in serves only /readyz,
/version and /kv.

Examples:
  hamaster --cluster demo kubeconfig > demo.kubeconfig
  hamaster --cluster demo kubeconfig --file demo.kubeconfig
  kubectl --kubeconfig demo.kubeconfig get --raw /readyz
  kubectl --kubeconfig demo.kubeconfig get ns
  hamaster --cluster demo kubeconfig --user alice --group dev --group qa --validity 24h`

func kubeconfigCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:        "kubeconfig",
		Usage:       "write a kubeconfig for the cluster endpoint with a client certificate signed by the cluster CA",
		Description: kubeconfigDescription,
		Flags:       kubeconfigFlags(),
		Action:      func(c *cli.Context) error { return issueKubeconfig(c, e, g) },
	}
}

func kubeconfigFlags() []cli.Flag {
	return readOnlyFlags(
		&cli.StringFlag{Name: "user", Aliases: []string{"client-name"}, Value: "hamaster-admin", Usage: "the certificate's CN: the Kubernetes `USER` name"},
		&cli.StringSliceFlag{Name: "group", Aliases: []string{"org"}, Usage: "the certificate's O: a Kubernetes `GROUP` (repeat for more; default: the cluster's administrators' group, see above)"},
		&cli.DurationFlag{Name: "validity", Value: workflows.MaxClientValidity, Usage: "how long the certificate is valid from now, at most 8760h"},
		&cli.StringFlag{Name: "server", Usage: "the kubeconfig's server `URL` (default: the cluster endpoint, see above)"},
		&cli.StringFlag{Name: "file", Usage: "write the kubeconfig to `FILE` (mode 0600) instead of stdout"},
	)
}

// issueKubeconfig is the action of kubeconfig.
func issueKubeconfig(c *cli.Context, e *env, g *globals) error {
	params, err := kubeconfigParams(c, e)
	if err != nil {
		return err
	}
	return g.withDeps(c, e, func(_ providers.Provider, d *workflows.Deps) error {
		ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
		defer cancel()
		kc, err := workflows.Kubeconfig(ctx, d, params)
		if err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		if f := c.String("file"); f != "" {
			return writeKubeconfig(e, f, kc)
		}
		_, err = e.stdout.Write(kc.Doc)
		return err
	})
}

// kubeconfigParams checks the flags of kubeconfig and reads them into the
// workflow's parameters.
func kubeconfigParams(c *cli.Context, e *env) (workflows.KubeconfigParams, error) {
	if err := applyReadOnly(c, e); err != nil {
		return workflows.KubeconfigParams{}, err
	}
	if c.String("user") == "" {
		return workflows.KubeconfigParams{}, usageErr("--user: empty; want the certificate's CN, e.g. hamaster-admin")
	}
	if v := c.Duration("validity"); v <= 0 || v > workflows.MaxClientValidity {
		return workflows.KubeconfigParams{}, usageErr("--validity %v: want more than 0 and at most %v (a client certificate cannot be revoked)", v, workflows.MaxClientValidity)
	}
	if s := c.String("server"); s != "" {
		if err := checkHTTPSURL(s); err != nil {
			return workflows.KubeconfigParams{}, usageErr("--server %q: %v", s, err)
		}
	}
	var groups []string // nil: the flavor's default
	if c.IsSet("group") {
		groups = c.StringSlice("group")
	}
	return workflows.KubeconfigParams{User: c.String("user"), Groups: groups, Validity: c.Duration("validity"), Server: c.String("server")}, nil
}

// writeKubeconfig writes kc to --file f (mode 0600) and tells the
// operator on stderr what it holds.
func writeKubeconfig(e *env, f string, kc workflows.IssuedKubeconfig) error {
	if err := fsutil.WriteFileAtomic(f, kc.Doc, 0o600); err != nil {
		return usageErr("--file %s: %v", f, err)
	}
	by := ""
	if kc.IssuedOn != "" {
		by = ", issued on " + kc.IssuedOn
	}
	fmt.Fprintf(e.stderr, "wrote %s (user %s, groups %s, server %s, valid until %s%s); try: kubectl --kubeconfig %s get --raw /readyz\n",
		f, kc.User, strings.Join(kc.Groups, ","), kc.Server, kc.NotAfter.UTC().Format(time.RFC3339), by, f)
	return nil
}

// checkHTTPSURL accepts https://host[:port] with nothing after it.
func checkHTTPSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("want https://host[:port]")
	}
	return nil
}
