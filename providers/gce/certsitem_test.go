package gce

import (
	"maps"
	"testing"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

// A kube-up master's kube-master-certs survives the trip through
// Template.Files unchanged, next to hamaster's own files.
func TestTemplateFilesRoundTrip(t *testing.T) {
	t.Parallel()
	m, err := kubeuptest.NewMaster(kubeuptest.Options{Project: "p", Zone: "us-central1-b", StaticIP: "198.18.0.10"})
	if err != nil {
		t.Fatal(err)
	}
	files, err := templateFiles(m.MasterCerts)
	if err != nil {
		t.Fatal(err)
	}
	files["ca.crt"] = []byte("hamaster's own file")
	back, err := templateFiles(certsItem(files))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(files, back, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("round trip changed the files:\n got %v\nwant %v", keys(back), keys(files))
	}
	want, _ := kubeenv.Parse(m.MasterCerts)
	got, _ := kubeenv.Parse(certsItem(files))
	delete(got, kubeenv.FileKey("ca.crt"))
	if !maps.Equal(want, got) {
		t.Fatalf("kube-master-certs values changed")
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
