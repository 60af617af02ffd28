package gce

import "testing"

// (Moved from kubeenv's TestIsReplicaName, cases unchanged: the GCE
// provider now owns how it finds its masters by name.)
func TestIsMasterName(t *testing.T) {
	t.Parallel()
	in := &instances{p: &Provider{cluster: "kubernetes", opts: map[string]string{}}}
	for name, want := range map[string]bool{
		"kubernetes-master": true, "kubernetes-master-a1b": true, "kubernetes-master-ip": false,
		"kubernetes-master-a1bc": false, "kubernetes-minion-group-x": false, "kubernetes-master-A1B": false,
	} {
		if got := in.isMasterName(name); got != want {
			t.Errorf("isMasterName(%s) = %v, want %v", name, got, want)
		}
	}
}
