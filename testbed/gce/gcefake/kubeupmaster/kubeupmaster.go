// Package kubeupmaster creates a kube-up master 0 on a Compute API (the
// GCE fake) through its REST API, exactly as kube-up creates one, never
// through the provider under test:
//
//   - cluster/gce/util.sh upload-tars: the devel build's server and
//     manifests tarballs into the staging bucket kube-env's
//     SERVER_BINARY_TAR_URL and KUBE_MANIFESTS_TAR_URL name
//     (https://storage.googleapis.com/kubernetes-staging-<hash>/kubernetes-devel/),
//     uploaded to the fake's storage (Options.StorageURL);
//   - cluster/gce/util.sh create-static-ip: the regional address
//     MASTER_NAME-ip;
//   - util.sh create-master: the data disk MASTER_NAME-pd (pd-ssd), the
//     firewall rules MASTER_NAME-https (tcp:443 from anywhere to the
//     master tag) and MASTER_NAME-etcd (tcp:2380,2381 between masters);
//   - cluster/gce/gci/master-helper.sh create-master-instance and
//     create-master-instance-internal: the instance MASTER_NAME with the
//     static IP as its access config, the master tag, the metadata items
//     kube-env and kube-master-certs (kubeenv/kubeuptest: certificates as
//     create-certs and create-etcd-certs make them) beside user-data,
//     configure-sh, cluster-name, cluster-location, gci-update-strategy and
//     kube-master-internal-route, the disk attached as device master-pd
//     (mode rw, boot no, auto-delete no) and kube-up's scopes.
//
// The operator's SSH key goes into the project's ssh-keys, as `gcloud
// compute ssh` puts it there.
package kubeupmaster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

// Options describe the kube-up cluster.
type Options struct {
	// Endpoint is the Compute API's base URL (the fake's URL).
	Endpoint string
	Project  string
	Zone     string
	// InstancePrefix is kube-up's INSTANCE_PREFIX (default "kubernetes");
	// MASTER_NAME is <prefix>-master.
	InstancePrefix string
	// SSHKeys are lines of the project's ssh-keys metadata
	// ("USER:ssh-ed25519 AAAA... comment").
	SSHKeys []string
	// HTTPClient (default: one with a 2-minute timeout).
	HTTPClient *http.Client
	// StorageURL is where upload-tars' objects go: PUT
	// <StorageURL>/<bucket>/<object> (the fake's StorageURL; default
	// Endpoint/storage).
	StorageURL string
	// DevelVersion is the version inside the devel upload (default
	// kubeuptest.DefaultDevelVersion).
	DevelVersion string
}

// Master is the created master 0.
type Master struct {
	Name, Zone, Region string
	// Tag is MASTER_TAG (<prefix>-master), on every master.
	Tag string
	// StaticIP is MASTER_NAME-ip's address, master 0's access config.
	StaticIP string
	// Metadata is master 0's kube-env and kube-master-certs and the CAs
	// they hold.
	Metadata *kubeuptest.Master
}

// Scopes are create-master-instance-internal's --scopes
// "storage-ro,compute-rw,monitoring,logging-write".
var Scopes = []string{
	"https://www.googleapis.com/auth/devstorage.read_only",
	"https://www.googleapis.com/auth/compute",
	"https://www.googleapis.com/auth/monitoring",
	"https://www.googleapis.com/auth/logging.write",
}

// Create makes master 0 and waits for every operation; it does not wait
// for the master to serve (see the instance's serial port output).
func Create(ctx context.Context, o Options) (*Master, error) {
	if o.InstancePrefix == "" {
		o.InstancePrefix = "kubernetes"
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 2 * time.Minute}
	}
	i := strings.LastIndex(o.Zone, "-")
	if o.Endpoint == "" || o.Project == "" || i <= 0 {
		return nil, fmt.Errorf("kube-up master: need Endpoint, Project and a zone such as us-central1-b (got %q)", o.Zone)
	}
	m := &Master{Name: o.InstancePrefix + "-master", Zone: o.Zone, Region: o.Zone[:i], Tag: o.InstancePrefix + "-master"}
	c := &client{base: strings.TrimSuffix(o.Endpoint, "/") + "/compute/v1/projects/" + o.Project + "/", http: o.HTTPClient}
	zone, region := "zones/"+m.Zone+"/", "regions/"+m.Region+"/"
	network := "global/networks/default"

	// create-static-ip MASTER_NAME-ip REGION.
	if err := c.insert(ctx, region+"addresses", map[string]any{"name": m.Name + "-ip", "addressType": "EXTERNAL"}); err != nil {
		return nil, err
	}
	var addr struct{ Address string }
	if err := c.do(ctx, http.MethodGet, region+"addresses/"+m.Name+"-ip", nil, &addr); err != nil {
		return nil, err
	}
	m.StaticIP = addr.Address
	md, err := kubeuptest.NewMaster(kubeuptest.Options{InstancePrefix: o.InstancePrefix, Project: o.Project, Zone: o.Zone, StaticIP: m.StaticIP, DevelVersion: o.DevelVersion})
	if err != nil {
		return nil, err
	}
	m.Metadata = md
	// upload-tars (kube-up's create-master runs it first; the order does
	// not matter to the fake): gsutil cp into the staging bucket.
	if err := uploadTars(ctx, o, md); err != nil {
		return nil, err
	}

	// create-master: the PD, then the firewall rules.
	if err := c.insert(ctx, zone+"disks", map[string]any{"name": m.Name + "-pd", "sizeGb": "20", "type": c.link(zone + "diskTypes/pd-ssd")}); err != nil {
		return nil, err
	}
	for _, fw := range []map[string]any{
		{"name": m.Name + "-https", "network": c.link(network), "sourceRanges": []any{"0.0.0.0/0"}, "targetTags": []any{m.Tag},
			"allowed": []any{map[string]any{"IPProtocol": "tcp", "ports": []any{"443"}}}},
		{"name": m.Name + "-etcd", "network": c.link(network), "sourceTags": []any{m.Tag}, "targetTags": []any{m.Tag},
			"allowed": []any{map[string]any{"IPProtocol": "tcp", "ports": []any{"2380", "2381"}}}},
	} {
		if err := c.insert(ctx, "global/firewalls", fw); err != nil {
			return nil, err
		}
	}
	if len(o.SSHKeys) > 0 {
		if err := c.addProjectSSHKeys(ctx, o.SSHKeys); err != nil {
			return nil, err
		}
	}

	// create-master-instance-internal.
	item := func(k, v string) any { return map[string]any{"key": k, "value": v} }
	inst := map[string]any{
		"name":        m.Name,
		"machineType": c.link(zone + "machineTypes/n1-standard-1"),
		"tags":        map[string]any{"items": []any{m.Tag}},
		"serviceAccounts": []any{map[string]any{"email": "default", "scopes": func() []any {
			var s []any
			for _, x := range Scopes {
				s = append(s, x)
			}
			return s
		}()}},
		"metadata": map[string]any{"items": []any{
			item(kubeenv.KeyEnv, md.KubeEnv),
			item("user-data", userData),
			item("configure-sh", configureSh),
			item("cluster-location", m.Zone),
			item("cluster-name", o.InstancePrefix),
			item("gci-update-strategy", "update_disabled"),
			item(kubeenv.KeyCerts, md.MasterCerts),
			item("kube-master-internal-route", "#!/bin/bash\n# kube-master-internal-route.sh: not needed without an internal master IP\n"),
		}},
		"disks": []any{
			map[string]any{"boot": true, "autoDelete": true, "initializeParams": map[string]any{
				"sourceImage": "projects/cos-cloud/global/images/cos-121-18867-90-38", "diskSizeGb": "20"}},
			map[string]any{"source": c.link(zone + "disks/" + m.Name + "-pd"), "deviceName": "master-pd", "mode": "READ_WRITE", "boot": false, "autoDelete": false},
		},
		"networkInterfaces": []any{map[string]any{
			"network":       c.link(network),
			"accessConfigs": []any{map[string]any{"name": "external-nat", "type": "ONE_TO_ONE_NAT", "natIP": m.StaticIP}},
		}},
	}
	if err := c.insert(ctx, zone+"instances", inst); err != nil {
		return nil, err
	}
	return m, nil
}

// uploadTars puts the devel tarballs where kube-env's URLs point.
func uploadTars(ctx context.Context, o Options, md *kubeuptest.Master) error {
	env, err := kubeenv.Parse(md.KubeEnv)
	if err != nil {
		return err
	}
	base := o.StorageURL
	if base == "" {
		base = strings.TrimSuffix(o.Endpoint, "/") + "/storage"
	}
	for key, body := range map[string][]byte{kubeenv.ServerBinaryTarURL: md.ServerTar, kubeenv.KubeManifestsTarURL: md.ManifestsTar} {
		obj, ok := strings.CutPrefix(env[key], "https://storage.googleapis.com/")
		if !ok {
			return fmt.Errorf("upload-tars: kube-env %s=%q is not a Cloud Storage URL", key, env[key])
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimSuffix(base, "/")+"/"+obj, bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := o.HTTPClient.Do(req)
		if err != nil {
			return fmt.Errorf("upload-tars %s: %w", obj, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("upload-tars %s: %s: %s", obj, resp.Status, bytes.TrimSpace(b))
		}
	}
	return nil
}

// userData stands for cluster/gce/gci/master.yaml (cloud-init that
// fetches configure.sh and runs configure-helper.sh); the fake boots the
// master from kube-env directly.
const userData = "#cloud-config\n# cluster/gce/gci/master.yaml: runs configure.sh, then configure-helper.sh\n"

// configureSh stands for cluster/gce/gci/configure.sh.
const configureSh = "#!/bin/bash\n# cluster/gce/gci/configure.sh: downloads the release and runs configure-helper.sh\n"

type client struct {
	base string
	http *http.Client
}

func (c *client) link(rel string) string { return c.base + rel }

// do sends a JSON request and decodes the JSON answer into out.
func (c *client) do(ctx context.Context, method, rel string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + rel
	if rel == "" {
		u = strings.TrimSuffix(c.base, "/") // the project itself
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, rel, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, rel, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, rel, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, rel, err)
		}
	}
	return nil
}

type operation struct {
	Name, Status, Zone, Region string
	Error                      *struct {
		Errors []struct{ Code, Message string }
	}
}

// insert creates a resource under coll ("zones/Z/disks") and waits for
// its operation.
func (c *client) insert(ctx context.Context, coll string, body map[string]any) error {
	var op operation
	if err := c.do(ctx, http.MethodPost, coll, body, &op); err != nil {
		return fmt.Errorf("create %s: %w", body["name"], err)
	}
	if err := c.wait(ctx, coll, op); err != nil {
		return fmt.Errorf("create %s: %w", body["name"], err)
	}
	return nil
}

// wait blocks until op is DONE and returns its error.
func (c *client) wait(ctx context.Context, coll string, op operation) error {
	scope := "global/"
	if z, ok := strings.CutPrefix(coll, "zones/"); ok {
		scope = "zones/" + z[:strings.Index(z, "/")] + "/"
	} else if r, ok := strings.CutPrefix(coll, "regions/"); ok {
		scope = "regions/" + r[:strings.Index(r, "/")] + "/"
	}
	for op.Status != "DONE" {
		if err := c.do(ctx, http.MethodPost, scope+"operations/"+op.Name+"/wait", nil, &op); err != nil {
			return err
		}
	}
	if op.Error != nil && len(op.Error.Errors) > 0 {
		return fmt.Errorf("operation %s: %s: %s", op.Name, op.Error.Errors[0].Code, op.Error.Errors[0].Message)
	}
	return nil
}

// addProjectSSHKeys appends lines to the project's ssh-keys, as `gcloud
// compute ssh` does (setCommonInstanceMetadata with the fingerprint read).
func (c *client) addProjectSSHKeys(ctx context.Context, lines []string) error {
	var p struct {
		CommonInstanceMetadata struct {
			Fingerprint string
			Items       []struct{ Key, Value string }
		}
	}
	if err := c.do(ctx, http.MethodGet, "", nil, &p); err != nil {
		return err
	}
	items := []any{}
	keys := ""
	for _, it := range p.CommonInstanceMetadata.Items {
		if it.Key == "ssh-keys" {
			keys = strings.TrimRight(it.Value, "\n") + "\n"
			continue
		}
		items = append(items, map[string]any{"key": it.Key, "value": it.Value})
	}
	keys += strings.Join(lines, "\n")
	items = append(items, map[string]any{"key": "ssh-keys", "value": keys})
	var op operation
	if err := c.do(ctx, http.MethodPost, "setCommonInstanceMetadata", map[string]any{"fingerprint": p.CommonInstanceMetadata.Fingerprint, "items": items}, &op); err != nil {
		return fmt.Errorf("project ssh-keys: %w", err)
	}
	return c.wait(ctx, "global/x", op)
}

// WaitReady polls https://ip:443/readyz, verified with pool, until 200
// or timeout; failed, when set, returns a non-empty reason to stop early.
func WaitReady(ctx context.Context, pool *x509.CertPool, ip string, timeout time.Duration, failed func() string) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}}
	return kubeuptest.WaitReady(ctx, client, "https://"+ip+":443/readyz", timeout, failed)
}

// WriteSSHKey writes a new ed25519 key (OpenSSH format) to dir/id_ed25519
// and returns its path and its line for GCE's ssh-keys metadata
// ("USER:ssh-ed25519 AAAA... USER@gcefake").
func WriteSSHKey(dir, user string) (keyFile, sshKeysLine string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, user+"@gcefake")
	if err != nil {
		return "", "", err
	}
	keyFile = filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(block), 0o600); err != nil {
		return "", "", err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", "", err
	}
	line := user + ":" + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " " + user + "@gcefake"
	if err := os.WriteFile(keyFile+".pub", []byte(strings.TrimPrefix(line, user+":")+"\n"), 0o644); err != nil {
		return "", "", err
	}
	return keyFile, line, nil
}
