package gcefake

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hamaster/hamaster/kubeenv"
	"github.com/hamaster/hamaster/kubeenv/kubeuptest"
)

// The fake's object storage stands in for the two places a kube-up master
// downloads its release from: Cloud Storage (kube-up's upload-tars puts
// the devel upload in gs://kubernetes-staging-<hash>/kubernetes-devel/,
// read back as https://storage.googleapis.com/<bucket>/<object>) and a
// release site (dl.k8s.io/release/<v>/, or an operator's mirror). Objects
// are files under Dir/storage/<bucket>/<object>, served over HTTP at
// <URL>/storage/<bucket>/<object> (GET, HEAD, and PUT to upload, the
// shape of Cloud Storage's XML API).
//
// A master VM downloads kube-env's SERVER_BINARY_TAR_URL and
// KUBE_MANIFESTS_TAR_URL from this storage when the URL is one of its
// objects' (https://storage.googleapis.com/... or <URL>/storage/...):
// the fake hands the object's file to hamaster-node (--download
// URL=FILE) rather than routing the VM's namespace to the fake's
// listener on the host's loopback, which a namespace cannot reach; on GCE
// the VM reaches both over the internet or Private Google Access. Any
// other URL (the real dl.k8s.io) cannot be downloaded from a fake VM:
// such a master never comes up, as a VM without egress would not.
const storagePath = "/storage/"

// gcsPublic is Cloud Storage's public URL prefix.
const gcsPublic = "https://storage.googleapis.com/"

// ReleaseBucket holds the release mirror (AddRelease).
const ReleaseBucket = "kubernetes-release"

// ReleaseURL is the base URL of the fake's release mirror, for
// --gce-release-url: <ReleaseURL>/<version>/kubernetes-server-linux-amd64.tar.gz.
func (s *Server) ReleaseURL() string { return s.URL + storagePath + ReleaseBucket + "/release" }

// StorageURL is the base URL objects are uploaded to and served from.
func (s *Server) StorageURL() string { return strings.TrimSuffix(s.URL+storagePath, "/") }

// ReleaseOptions change what AddRelease publishes.
type ReleaseOptions struct {
	// BadServerHash publishes a .sha512 for the server tarball that does
	// not match it (a corrupted upload or a tampered mirror).
	BadServerHash bool
}

// AddRelease publishes version on the release mirror as the release
// process does: kubernetes-server-linux-amd64.tar.gz (holding
// kubernetes/version) and kubernetes-manifests.tar.gz, each with its
// .sha512.
func (s *Server) AddRelease(version string, o ReleaseOptions) error {
	server, err := kubeuptest.ServerTarball(version)
	if err != nil {
		return err
	}
	manifests, err := kubeuptest.ManifestsTarball(version)
	if err != nil {
		return err
	}
	serverHash := kubeenv.SHA512Hex(server)
	if o.BadServerHash {
		serverHash = kubeenv.SHA512Hex(append([]byte("not "), server...))
	}
	dir := "release/" + version + "/"
	for name, body := range map[string][]byte{
		kubeenv.ServerTarName: server, kubeenv.ServerTarName + ".sha512": []byte(serverHash + "\n"),
		kubeenv.ManifestsTarName: manifests, kubeenv.ManifestsTarName + ".sha512": []byte(kubeenv.SHA512Hex(manifests) + "\n"),
	} {
		if err := s.PutObject(ReleaseBucket, dir+name, body); err != nil {
			return err
		}
	}
	return nil
}

// PutObject stores bucket/object.
func (s *Server) PutObject(bucket, object string, data []byte) error {
	p, err := s.objectPath(bucket + "/" + object)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("gcefake storage: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("gcefake storage: %w", err)
	}
	return os.Rename(tmp, p)
}

// objectPath is the file of "bucket/object".
func (s *Server) objectPath(key string) (string, error) {
	if s.o.Dir == "" {
		return "", fmt.Errorf("gcefake storage: no Options.Dir")
	}
	clean := path.Clean("/" + key)
	b, o, ok := strings.Cut(strings.TrimPrefix(clean, "/"), "/")
	if clean != "/"+key || !ok || b == "" || o == "" {
		return "", fmt.Errorf("gcefake storage: %q is not bucket/object", key)
	}
	return filepath.Join(s.o.Dir, "storage", filepath.FromSlash(b+"/"+o)), nil
}

// downloadFile maps a URL a VM downloads to the object's file; ok is
// false for URLs outside the fake's storage.
func (s *Server) downloadFile(u string) (string, bool) {
	key, ok := strings.CutPrefix(u, gcsPublic)
	if !ok {
		if key, ok = strings.CutPrefix(u, s.URL+storagePath); !ok {
			return "", false
		}
	}
	p, err := s.objectPath(key)
	return p, err == nil
}

// serveStorage answers GET/HEAD (download) and PUT (upload) of objects.
func (s *Server) serveStorage(w http.ResponseWriter, r *http.Request) {
	p, err := s.objectPath(strings.TrimPrefix(r.URL.Path, storagePath))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		f, err := os.Open(p)
		if err != nil {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><Details>No such object: %s</Details></Error>", strings.TrimPrefix(r.URL.Path, storagePath))
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.ServeContent(w, r, "", st.ModTime(), f)
	case http.MethodPut:
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<30))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		key := strings.TrimPrefix(r.URL.Path, storagePath)
		b2, o, _ := strings.Cut(key, "/")
		if err := s.PutObject(b2, o, b); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}
