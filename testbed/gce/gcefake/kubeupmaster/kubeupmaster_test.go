package kubeupmaster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
	"github.com/hamaster/hamaster/testbed/gce/gcefake"
	"github.com/hamaster/hamaster/testbed/gce/gcefake/kubeupmaster"
	"github.com/hamaster/hamaster/testbed/gce/gcetest"
)

// TestCreateAsKubeUp checks what Create leaves in the API against
// create-master and create-master-instance (no data plane: no root
// needed).
func TestCreateAsKubeUp(t *testing.T) {
	t.Parallel()
	fake := gcetest.Fake(t, gcefake.Options{Subnet: 249})
	fake.SetLatency(func(string) time.Duration { return 5 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard: seconds alone, minutes under the race tier
	defer cancel()
	const sshKey = "ops:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq2Cv0Q5TQWk5Yp6Ko+9fX3zrsJX2ZmWkqO0Q4dbHSY ops@laptop"
	m, err := kubeupmaster.Create(ctx, kubeupmaster.Options{Endpoint: fake.URL, Project: fake.Project(), Zone: "us-central1-b", InstancePrefix: "e2e", SSHKeys: []string{sshKey}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "e2e-master" || m.Tag != "e2e-master" || m.Region != "us-central1" {
		t.Fatalf("master %+v", m)
	}
	resp, err := http.Get(fake.URL + "/compute/v1/projects/" + fake.Project() + "/regions/us-central1/addresses/e2e-master-ip")
	if err != nil {
		t.Fatal(err)
	}
	var addr struct{ Address, Status string }
	err = json.NewDecoder(resp.Body).Decode(&addr)
	resp.Body.Close()
	if err != nil || addr.Address != m.StaticIP || addr.Status != "IN_USE" {
		t.Errorf("static IP e2e-master-ip: %+v %v (want %s, IN_USE by the master)", addr, err, m.StaticIP)
	}
	// gcloud compute ssh's key, project-wide.
	resp, err = http.Get(fake.URL + "/compute/v1/projects/" + fake.Project())
	if err != nil {
		t.Fatal(err)
	}
	var proj struct {
		CommonInstanceMetadata struct{ Items []struct{ Key, Value string } }
	}
	err = json.NewDecoder(resp.Body).Decode(&proj)
	resp.Body.Close()
	if err != nil || len(proj.CommonInstanceMetadata.Items) != 1 || proj.CommonInstanceMetadata.Items[0].Key != "ssh-keys" ||
		!strings.Contains(proj.CommonInstanceMetadata.Items[0].Value, sshKey) {
		t.Errorf("project metadata %+v %v, want ssh-keys with %q", proj, err, sshKey)
	}
	if d := fake.Resource("disks", "e2e-master-pd"); d == nil || !strings.HasSuffix(d["type"].(string), "/diskTypes/pd-ssd") {
		t.Errorf("disk e2e-master-pd: %v", d)
	}
	for _, fw := range []struct {
		name, port string
		fromAll    bool
	}{{"e2e-master-https", "443", true}, {"e2e-master-etcd", "2380", false}} {
		r := fake.Resource("firewalls", fw.name)
		if r == nil {
			t.Errorf("no firewall rule %s", fw.name)
			continue
		}
		allowed := r["allowed"].([]any)[0].(map[string]any)
		if !slices.Contains(allowed["ports"].([]any), any(fw.port)) || !slices.Equal(r["targetTags"].([]any), []any{"e2e-master"}) {
			t.Errorf("%s: %v", fw.name, r)
		}
		if _, all := r["sourceRanges"]; all != fw.fromAll {
			t.Errorf("%s source ranges %v (from anywhere: %v)", fw.name, r["sourceRanges"], fw.fromAll)
		}
	}
	in := fake.Resource("instances", "e2e-master")
	if in == nil {
		t.Fatal("no instance e2e-master")
	}
	nic := in["networkInterfaces"].([]any)[0].(map[string]any)
	if nat := nic["accessConfigs"].([]any)[0].(map[string]any)["natIP"]; nat != m.StaticIP {
		t.Errorf("access config natIP %v, want the static IP %s", nat, m.StaticIP)
	}
	if tags := in["tags"].(map[string]any)["items"].([]any); !slices.Equal(tags, []any{"e2e-master"}) {
		t.Errorf("tags %v", tags)
	}
	var pd map[string]any
	for _, d := range in["disks"].([]any) {
		if d := d.(map[string]any); d["deviceName"] == "master-pd" {
			pd = d
		}
	}
	if pd == nil || !strings.HasSuffix(pd["source"].(string), "/disks/e2e-master-pd") || pd["autoDelete"] != false || pd["boot"] != false || pd["mode"] != "READ_WRITE" {
		t.Errorf("data disk: %v", pd)
	}
	items := map[string]string{}
	for _, it := range in["metadata"].(map[string]any)["items"].([]any) {
		it := it.(map[string]any)
		items[it["key"].(string)] = it["value"].(string)
	}
	for _, k := range []string{"kube-env", "kube-master-certs", "user-data", "configure-sh", "cluster-name", "cluster-location", "gci-update-strategy", "kube-master-internal-route"} {
		if _, ok := items[k]; !ok {
			t.Errorf("metadata lacks %s", k)
		}
	}
	env, err := kubeenv.Parse(items["kube-env"])
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"INITIAL_ETCD_CLUSTER": "e2e-master", "KUBERNETES_MASTER_NAME": m.StaticIP, "ZONE": "us-central1-b", "INSTANCE_PREFIX": "e2e"} {
		if env[k] != want {
			t.Errorf("kube-env %s=%q, want %q", k, env[k], want)
		}
	}
	scopes := in["serviceAccounts"].([]any)[0].(map[string]any)["scopes"].([]any)
	if len(scopes) != len(kubeupmaster.Scopes) {
		t.Errorf("scopes %v", scopes)
	}
	// upload-tars: the devel upload is in the staging bucket, matching
	// kube-env's hashes, and holds the devel version.
	for urlKey, hashKey := range map[string]string{kubeenv.ServerBinaryTarURL: kubeenv.ServerBinaryTarHash, kubeenv.KubeManifestsTarURL: kubeenv.KubeManifestsTarHash} {
		obj, ok := strings.CutPrefix(env[urlKey], "https://storage.googleapis.com/kubernetes-staging-")
		if !ok || !strings.Contains(obj, "/kubernetes-devel/") || kubeenv.ReleaseVersion(env[urlKey]) != "" {
			t.Errorf("kube-env %s=%q: want kube-up's devel upload URL", urlKey, env[urlKey])
			continue
		}
		resp, err := http.Get(fake.StorageURL() + "/kubernetes-staging-" + obj)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s", env[urlKey], resp.Status)
			continue
		}
		if err := kubeenv.ValidateHash(body, env[hashKey]); err != nil {
			t.Errorf("%s: %v", hashKey, err)
		}
		if urlKey == kubeenv.ServerBinaryTarURL {
			if v, err := kubeenv.TarballVersion(bytes.NewReader(body)); err != nil || v != kubeuptest.DefaultDevelVersion {
				t.Errorf("devel upload's version %q, %v; want %s", v, err, kubeuptest.DefaultDevelVersion)
			}
		}
	}
}
