package kubelet

import "strings"

// EtcdArgs adapts an etcd static pod's flags (everything after the
// program name) to the etcd the stand-in links, go.etcd.io/etcd/server/v3
// v3.7: kubeadm 1.33 writes etcd 3.5's flags (its image is 3.5.x), 1.34
// etcd 3.6's (cmd/kubeadm/app/phases/etcd/local.go getEtcdCommand). 3.7
// dropped the --experimental-* spellings 3.5 used; the two kubeadm writes
// become their 3.6+ names. Everything else passes unchanged, so the
// member runs with the manifest's own names, URLs, certificates and data
// dir. The server is 3.7 whatever the image tag says: the cluster version
// it reports is 3.7's once all members run it.
func EtcdArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "experimental-initial-corrupt-check":
			if !hasVal || val == "true" {
				out = append(out, "--feature-gates=InitialCorruptCheck=true")
			}
			continue
		case "experimental-watch-progress-notify-interval":
			if hasVal {
				out = append(out, "--watch-progress-notify-interval="+val)
				continue
			}
		}
		out = append(out, a)
	}
	return out
}
