package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/providers"
	"github.com/hamaster/hamaster/workflows"
)

func kubeconfigCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "kubeconfig",
		Usage: "write a kubeconfig for the cluster endpoint with a client certificate signed by the cluster CA",
		Description: `Issues a new client certificate (ECDSA, signed by the cluster CA under
--state-dir) and prints a kubeconfig that uses it: server = the cluster
endpoint (its DNS name when one is recorded, else the static IP, which
the load balancer owns once there is more than one replica), CA = the
cluster CA. Nothing in the cluster changes; each run issues a new
certificate and the private key exists only in the output.

The certificate's CN is the Kubernetes user (--user) and its O fields the
groups (--group); system:masters is bound to cluster-admin by the real
apiserver's default RBAC. With the local provider this needs
'local up --control-plane real' for kubectl to find the Kubernetes API:
the stand-in serves only /readyz, /version and /kv.

Examples:
  hamaster --cluster demo kubeconfig > demo.kubeconfig
  hamaster --cluster demo kubeconfig --file demo.kubeconfig
  kubectl --kubeconfig demo.kubeconfig get --raw /readyz
  kubectl --kubeconfig demo.kubeconfig get ns
  hamaster --cluster demo kubeconfig --user alice --group dev --group qa`,
		Flags: readOnlyFlags(
			&cli.StringFlag{Name: "user", Value: "hamaster-admin", Usage: "the certificate's CN: the Kubernetes `USER` name"},
			&cli.StringSliceFlag{Name: "group", Value: cli.NewStringSlice("system:masters"), Usage: "the certificate's O: a Kubernetes `GROUP` (repeat for more; system:masters is cluster-admin)"},
			&cli.StringFlag{Name: "server", Usage: "the kubeconfig's server `URL` (default: the cluster endpoint, https://<static IP or DNS name>:<apiserver port>)"},
			&cli.StringFlag{Name: "file", Usage: "write the kubeconfig to `FILE` (mode 0600) instead of stdout"},
		),
		Action: func(c *cli.Context) error {
			if err := applyReadOnly(c, e); err != nil {
				return err
			}
			if c.String("user") == "" {
				return usageErr("--user: empty; want the certificate's CN, e.g. hamaster-admin")
			}
			if s := c.String("server"); s != "" {
				if err := checkHTTPSURL(s); err != nil {
					return usageErr("--server %q: %v", s, err)
				}
			}
			return g.withDeps(c, e, func(_ providers.Provider, d *workflows.Deps) error {
				ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
				defer cancel()
				out, err := workflows.Kubeconfig(ctx, d, workflows.KubeconfigParams{User: c.String("user"), Groups: c.StringSlice("group"), Server: c.String("server")})
				if err != nil {
					return fmt.Errorf("kubeconfig: %w", err)
				}
				if f := c.String("file"); f != "" {
					if err := fsutil.WriteFileAtomic(f, out, 0o600); err != nil {
						return usageErr("--file %s: %v", f, err)
					}
					fmt.Fprintf(e.stderr, "wrote %s (user %s); try: kubectl --kubeconfig %s get --raw /readyz\n", f, c.String("user"), f)
					return nil
				}
				_, err = e.stdout.Write(out)
				return err
			})
		},
	}
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
