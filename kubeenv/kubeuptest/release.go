package kubeuptest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hamaster/hamaster/kubeenv"
)

// DefaultDevelVersion is the version of master 0's devel upload: what
// `make quick-release` builds from a tree between releases.
const DefaultDevelVersion = "v1.30.3-beta.0.12+0123456789abcd"

// ServerTarball is a kubernetes-server-linux-amd64.tar.gz of version, as
// build/lib/release.sh packs it: everything under kubernetes/, the
// version in kubernetes/version (binaries stand in as small files).
func ServerTarball(version string) ([]byte, error) {
	return tarball(map[string]string{
		kubeenv.VersionFile: version + "\n",
		"kubernetes/server/bin/kube-apiserver.docker_tag": version + "\n",
		"kubernetes/server/bin/kube-apiserver":            "#!/bin/false\n# kube-apiserver " + version + "\n",
	})
}

// ManifestsTarball is a kubernetes-manifests.tar.gz of version (the
// static-pod manifests configure-helper.sh installs).
func ManifestsTarball(version string) ([]byte, error) {
	return tarball(map[string]string{
		"kubernetes/gci-trusty/kube-apiserver.manifest": "# kube-apiserver " + version + "\n",
		"kubernetes/gci-trusty/etcd.manifest":           "# etcd\n",
	})
}

func tarball(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	mtime := time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return nil, fmt.Errorf("tarball %s: %w", name, err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return nil, fmt.Errorf("tarball %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
