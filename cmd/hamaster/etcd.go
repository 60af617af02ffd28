package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/etcdmember"
)

// memberJSON is the stable JSON shape of one member (also used by status).
type memberJSON struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peer_urls"`
	ClientURLs []string `json:"client_urls"`
	Learner    bool     `json:"learner"`
	Leader     bool     `json:"leader"`
	Healthy    bool     `json:"healthy"`
	Version    string   `json:"version"`
	RaftIndex  uint64   `json:"raft_index"`
	DBSize     int64    `json:"db_size"`
	Error      string   `json:"error,omitempty"`
}

func toMemberJSON(ms []etcdmember.Member) []memberJSON {
	out := make([]memberJSON, 0, len(ms))
	for _, m := range ms {
		out = append(out, memberJSON{
			ID: m.IDHex(), Name: m.Name, PeerURLs: nonNil(m.PeerURLs), ClientURLs: nonNil(m.ClientURLs),
			Learner: m.Learner, Leader: m.Leader, Healthy: m.Healthy, Version: m.Version,
			RaftIndex: m.RaftIndex, DBSize: m.DBSize, Error: m.Err,
		})
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// printMembers writes the members table: the leader marked with *, learners
// with (learner).
func printMembers(w io.Writer, ms []etcdmember.Member) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tHEALTHY\tVERSION\tRAFT INDEX\tPEER URLS\tCLIENT URLS")
	for _, m := range ms {
		role := "voter"
		switch {
		case m.Leader:
			role = "leader *"
		case m.Learner:
			role = "(learner)"
		}
		healthy := "yes"
		if !m.Healthy {
			healthy = "NO"
			if m.Err != "" {
				healthy += ": " + m.Err
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.IDHex(), m.Name, role, healthy, m.Version, m.RaftIndex,
			strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","))
	}
	tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func etcdFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "endpoints", EnvVars: []string{"HAMASTER_ENDPOINTS"}, Usage: "etcd client `URLS`, comma-separated (https://10.0.0.2:2379,...)"},
		&cli.StringFlag{Name: "cacert", EnvVars: []string{"HAMASTER_CACERT"}, Usage: "CA certificate `FILE` to verify etcd servers (TLS is optional)"},
		&cli.StringFlag{Name: "cert", EnvVars: []string{"HAMASTER_CERT"}, Usage: "client certificate `FILE` for etcd mTLS"},
		&cli.StringFlag{Name: "key", EnvVars: []string{"HAMASTER_KEY"}, Usage: "client key `FILE` for etcd mTLS"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, EnvVars: []string{"HAMASTER_TIMEOUT"}, Usage: "overall timeout"},
	}
}

func etcdConfig(c *cli.Context, g *globals) (etcdmember.Config, error) {
	var eps []string
	for _, e := range c.StringSlice("endpoints") {
		for _, p := range strings.Split(e, ",") {
			if p = strings.TrimSpace(p); p != "" {
				eps = append(eps, p)
			}
		}
	}
	if len(eps) == 0 {
		return etcdmember.Config{}, usageErr("--endpoints: required: at least one etcd client URL (e.g. https://10.0.0.2:2379)")
	}
	cfg := etcdmember.Config{Endpoints: eps, CACert: c.String("cacert"), Cert: c.String("cert"), Key: c.String("key"), Logger: g.logger}
	return cfg, nil
}

// demoEtcdTLS is the help examples' client TLS flags: the local demo
// cluster's.
const demoEtcdTLS = `      --cacert $HAMASTER_STATE_DIR/demo/pki/ca.crt \
      --cert $HAMASTER_STATE_DIR/demo/pki/etcd-client.crt \
      --key $HAMASTER_STATE_DIR/demo/pki/etcd-client.key`

// connectEtcd connects to etcd as c's flags (and the environment and
// config file) say.
func connectEtcd(c *cli.Context, e *env, g *globals) (*etcdmember.Client, error) {
	if err := applyConfig(c, e, c.Command.Flags, false); err != nil {
		return nil, err
	}
	cfg, err := etcdConfig(c, g)
	if err != nil {
		return nil, err
	}
	return etcdmember.New(c.Context, cfg)
}

// withEtcdClient connects as c's flags say and runs use with the client
// and a context bounded by --timeout.
func withEtcdClient(c *cli.Context, e *env, g *globals, use func(ctx context.Context, client *etcdmember.Client) error) error {
	client, err := connectEtcd(c, e, g)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := withTimeout(c)
	defer cancel()
	return use(ctx, client)
}

func etcdCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "etcd",
		Usage: "inspect an etcd cluster directly (members, health, snapshot)",
		Description: `Talks to etcd's client API at --endpoints, with mTLS when --cacert, --cert
and --key are given.

Example (any etcd; here the master of the local demo cluster):
  hamaster etcd members --endpoints https://127.0.65.2:2379 \
` + demoEtcdTLS + ` --output json`,
		Subcommands: []*cli.Command{
			etcdMembersCommand(e, g),
			etcdHealthCommand(e, g),
			etcdSnapshotCommand(e, g),
		},
	}
}

func etcdMembersCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "members",
		Usage: "list members: leader, learners, health, raft index, version",
		Description: `Prints one row per member; the leader is marked "leader *" and learners
"(learner)". With --output json:
  {"members":[{"id":"…","name":"…","peer_urls":[…],"client_urls":[…],
    "learner":false,"leader":true,"healthy":true,"version":"3.7.3"}]}

Example (the master of the local demo cluster):
  hamaster etcd members --endpoints https://127.0.65.2:2379 \
` + demoEtcdTLS,
		Flags:  etcdFlags(),
		Action: func(c *cli.Context) error { return etcdMembers(c, e, g) },
	}
}

// etcdMembers is the action of 'etcd members'.
func etcdMembers(c *cli.Context, e *env, g *globals) error {
	var ms []etcdmember.Member
	if err := withEtcdClient(c, e, g, func(ctx context.Context, client *etcdmember.Client) (err error) {
		if ms, err = client.Members(ctx); err != nil {
			return fmt.Errorf("list etcd members: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	if g.json() {
		return writeJSON(e.stdout, map[string]any{"members": toMemberJSON(ms)})
	}
	printMembers(e.stdout, ms)
	return nil
}

func etcdHealthCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:  "health",
		Usage: "check every member; exit 3 when any voter is unhealthy or there is no leader",
		Description: `Example (the master of the local demo cluster):
  hamaster etcd health --endpoints https://127.0.65.2:2379 \
` + demoEtcdTLS,
		Flags:  etcdFlags(),
		Action: func(c *cli.Context) error { return etcdHealth(c, e, g) },
	}
}

// etcdHealth is the action of 'etcd health'.
func etcdHealth(c *cli.Context, e *env, g *globals) error {
	// Unreachable: a connection that failed as unavailable,
	// or a listing that failed once connected.
	var ms []etcdmember.Member
	connected := false
	err := withEtcdClient(c, e, g, func(ctx context.Context, client *etcdmember.Client) (err error) {
		connected = true
		ms, err = client.Members(ctx)
		return err
	})
	if err != nil && (connected || errors.Is(err, errkind.Unavailable)) {
		return errkind.Errorf(errkind.FailedPrecondition, "etcd unhealthy: unreachable: %w", err)
	}
	if err != nil {
		return err
	}
	problems := healthProblems(ms)
	if g.json() {
		if err := writeJSON(e.stdout, map[string]any{"healthy": len(problems) == 0, "problems": nonNil(problems), "members": toMemberJSON(ms)}); err != nil {
			return err
		}
	} else {
		printMembers(e.stdout, ms)
		if len(problems) == 0 {
			fmt.Fprintln(e.stdout, "healthy: every voter answers and there is one leader")
		}
	}
	if len(problems) > 0 {
		return errkind.Errorf(errkind.FailedPrecondition, "etcd unhealthy: %s", strings.Join(problems, "; "))
	}
	return nil
}

func etcdSnapshotCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:      "snapshot",
		Usage:     "save a snapshot of the keyspace through the maintenance API",
		ArgsUsage: " ",
		Description: `Writes the snapshot atomically (mode 0600) and prints its size and sha256.

Example (the master of the local demo cluster):
  hamaster etcd snapshot --endpoints https://127.0.65.2:2379 --file backup.db \
` + demoEtcdTLS,
		Flags:  append(etcdFlags(), &cli.StringFlag{Name: "file", Usage: "`PATH` to write the snapshot to (required)"}),
		Action: func(c *cli.Context) error { return etcdSnapshot(c, e, g) },
	}
}

// etcdSnapshot is the action of 'etcd snapshot'.
func etcdSnapshot(c *cli.Context, e *env, g *globals) error {
	return withEtcdClient(c, e, g, func(ctx context.Context, client *etcdmember.Client) error {
		path := c.String("file")
		if path == "" {
			return usageErr("--file: required: where to write the snapshot")
		}
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			return usageErr("--file: %s is a directory", path)
		}
		info, err := client.SaveSnapshot(ctx, path)
		if err != nil {
			return fmt.Errorf("etcd snapshot: %w", err)
		}
		if g.json() {
			return writeJSON(e.stdout, map[string]any{"path": path, "size": info.Size, "sha256": info.SHA256, "endpoint": info.Endpoint, "revision": info.Revision})
		}
		fmt.Fprintf(e.stdout, "snapshot saved: %s (%d bytes, sha256 %s, from %s)\n", path, info.Size, info.SHA256, info.Endpoint)
		return nil
	})
}

func withTimeout(c *cli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, c.Duration("timeout"))
}

// healthProblems lists why a member set is not healthy: no leader, an
// unhealthy voter.
func healthProblems(ms []etcdmember.Member) []string {
	var problems []string
	leaders := 0
	for _, m := range ms {
		if m.Leader {
			leaders++
		}
		if !m.Learner && !m.Healthy {
			problems = append(problems, fmt.Sprintf("voter %s (%s) unhealthy: %s", m.Name, m.IDHex(), m.Err))
		}
	}
	if leaders == 0 {
		problems = append(problems, "no leader")
	}
	return problems
}
