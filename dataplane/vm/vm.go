// Package vm prepares what a hamaster-node replica boots from — what a
// cloud VM's boot scripts derive from its metadata: the certificate files
// and the env file (the template's kube-env plus the runtime keys: name,
// address, file paths, ports). The local provider and the cloud fakes'
// test harnesses boot replicas through it, so every "VM" boots the same way.
package vm

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hamaster/hamaster/dataplane/nodeapi"
	"github.com/hamaster/hamaster/errkind"
	"github.com/hamaster/hamaster/internal/fsutil"
	"github.com/hamaster/hamaster/kubeenv"
)

// Layout names the files of one booted replica.
type Layout struct {
	// Dir holds certs/, env, static-ip, node.pid, status.json, node.log.
	Dir string
	// DataDir is the persistent disk (etcd's data lives under it).
	DataDir string
	// APIServerPort is the port the apiserver serves on (0:
	// nodeapi.APIServerPort; kube-up's GCE masters serve 443).
	APIServerPort int
}

// EnvFile is the env file the node reads (--env-file).
func (l Layout) EnvFile() string { return filepath.Join(l.Dir, "env") }

// StaticIPFile is the "access config": the static IP the node also binds.
func (l Layout) StaticIPFile() string { return filepath.Join(l.Dir, "static-ip") }

// PIDFile is written by the node at start.
func (l Layout) PIDFile() string { return filepath.Join(l.Dir, "node.pid") }

// StatusFile is the node's JSON status.
func (l Layout) StatusFile() string { return filepath.Join(l.Dir, "status.json") }

// LogFile receives the node's output.
func (l Layout) LogFile() string { return filepath.Join(l.Dir, "node.log") }

func (l Layout) certDir() string { return filepath.Join(l.Dir, "certs") }

// Spec is what a replica boots with: its template's version, apiserver
// flags, env and certificate files (base name → content).
type Spec struct {
	Version   string
	ExtraArgs []string
	Env       map[string]string
	Files     map[string][]byte
}

// Prepare writes tmpl's certificate files and the env file for replica
// name on address, creates the data dir, and removes a stale status file.
// It returns the env file's path.
func Prepare(l Layout, name, address string, tmpl Spec) (string, error) {
	for _, d := range []string{l.certDir(), l.DataDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", fmt.Errorf("prepare replica %s: %w", name, err)
		}
	}
	for fname, data := range tmpl.Files {
		if fname == "" || strings.ContainsAny(fname, "/\\") || fname == "." || fname == ".." {
			return "", errkind.Errorf(errkind.InvalidArgument, "template file name %q must be a base name", fname)
		}
		if err := fsutil.WriteFileAtomic(filepath.Join(l.certDir(), fname), data, 0o600); err != nil {
			return "", err
		}
	}
	env := make(map[string]string, len(tmpl.Env)+20)
	for k, v := range tmpl.Env {
		env[k] = v
	}
	file := func(f string) string { return filepath.Join(l.certDir(), f) }
	for k, v := range map[string]string{
		nodeapi.KeyNodeName:           name,
		nodeapi.KeyNodeAddress:        address,
		nodeapi.KeyEtcdCACert:         file(nodeapi.FileCACert),
		nodeapi.KeyEtcdPeerCert:       file(nodeapi.FileEtcdPeerCert),
		nodeapi.KeyEtcdPeerKey:        file(nodeapi.FileEtcdPeerKey),
		nodeapi.KeyEtcdServerCert:     file(nodeapi.FileEtcdServerCert),
		nodeapi.KeyEtcdServerKey:      file(nodeapi.FileEtcdServerKey),
		nodeapi.KeyAPIServerCert:      file(nodeapi.FileAPIServerCert),
		nodeapi.KeyAPIServerKey:       file(nodeapi.FileAPIServerKey),
		nodeapi.KeyKubeVersion:        tmpl.Version,
		nodeapi.KeyAPIServerExtraArgs: strings.Join(tmpl.ExtraArgs, " "),
		nodeapi.KeyDataDir:            l.DataDir,
		nodeapi.KeyStaticIPFile:       l.StaticIPFile(),
		nodeapi.KeyPIDFile:            l.PIDFile(),
		nodeapi.KeyStatusFile:         l.StatusFile(),
		nodeapi.KeyEtcdClientPort:     strconv.Itoa(nodeapi.EtcdClientPort),
		nodeapi.KeyEtcdPeerPort:       strconv.Itoa(nodeapi.EtcdPeerPort),
		nodeapi.KeyAPIServerPort:      strconv.Itoa(cmp.Or(l.APIServerPort, nodeapi.APIServerPort)),
	} {
		env[k] = v
	}
	if err := fsutil.WriteFileAtomic(l.EnvFile(), []byte(kubeenv.Render(env)), 0o600); err != nil {
		return "", err
	}
	_ = os.Remove(l.StatusFile())
	return l.EnvFile(), nil
}
