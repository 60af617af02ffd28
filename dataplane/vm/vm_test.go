package vm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/kubeenv"
)

func TestPrepareWritesWhatTheNodeReads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := Layout{Dir: filepath.Join(dir, "inst"), DataDir: filepath.Join(dir, "disk")}
	tmpl := Spec{
		Version: "v1.30.2", ExtraArgs: []string{"--v=2", "--feature-gates=A=true"},
		Env:   map[string]string{"INITIAL_ETCD_CLUSTER": "m=https://127.0.9.2:2380", "QUOTED": "it's"},
		Files: map[string][]byte{nodeapi.FileCACert: []byte("ca")},
	}
	path, err := Prepare(l, "m", "127.0.9.2", tmpl)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env, err := kubeenv.Parse(string(b))
	if err != nil {
		t.Fatalf("the node cannot parse the env file: %v", err)
	}
	want := map[string]string{
		nodeapi.KeyNodeName: "m", nodeapi.KeyNodeAddress: "127.0.9.2", nodeapi.KeyKubeVersion: "v1.30.2",
		nodeapi.KeyAPIServerExtraArgs: "--v=2 --feature-gates=A=true", nodeapi.KeyDataDir: l.DataDir,
		"INITIAL_ETCD_CLUSTER": "m=https://127.0.9.2:2380", "QUOTED": "it's",
		nodeapi.KeyEtcdCACert: filepath.Join(l.Dir, "certs", nodeapi.FileCACert),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if b, err := os.ReadFile(env[nodeapi.KeyEtcdCACert]); err != nil || string(b) != "ca" {
		t.Errorf("certificate file: %q %v", b, err)
	}
	if st, err := os.Stat(l.DataDir); err != nil || !st.IsDir() {
		t.Errorf("data dir: %v", err)
	}
}

func TestPrepareRefusesPathsInFileNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, bad := range []string{"../x", "a/b", "..", ""} {
		_, err := Prepare(Layout{Dir: dir, DataDir: filepath.Join(dir, "d")}, "m", "127.0.0.2", Spec{Files: map[string][]byte{bad: nil}})
		if err == nil {
			t.Errorf("file name %q accepted", bad)
		}
	}
}
