package gce

import (
	"regexp"

	"github.com/hamaster/hamaster/kubeenv"
)

// kubeUpKeyRE matches kube-master-certs keys (shell variable names in
// capitals: CA_KEY, ETCD_APISERVER_CLIENT_CERT); hamaster's own file names
// (ca.crt) never match.
var kubeUpKeyRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// Template.Files holds the kube-master-certs item: each kube-up key with
// its value base64-decoded (so gzip bytes for ETCD_APISERVER_* certificates),
// and hamaster's own files under their names (kubeenv.FileKey in the
// item). templateFiles reads the item; certsItem writes it back unchanged.
func templateFiles(item string) (map[string][]byte, error) {
	all, err := kubeenv.ParseCerts(item)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(all))
	for k, v := range all {
		if n, ok := kubeenv.FileName(k); ok {
			k = n
		}
		out[k] = v
	}
	return out, nil
}

func certsItem(files map[string][]byte) string {
	m := make(map[string][]byte, len(files))
	for k, v := range files {
		if !kubeUpKeyRE.MatchString(k) {
			k = kubeenv.FileKey(k)
		}
		m[k] = v
	}
	return kubeenv.RenderCerts(m)
}
