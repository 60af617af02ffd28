package kubeenv

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha1" //nolint:gosec // validate-hash accepts sha1 hashes; not used for security here
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
)

// A kube-up master's version is its server tarball: configure.sh
// (install-kube-binary-config) downloads SERVER_BINARY_TAR_URL with
// download-or-bust, checks it against SERVER_BINARY_TAR_HASH
// (validate-hash) and unpacks it; install-kube-manifests does the same
// with KUBE_MANIFESTS_TAR_URL / KUBE_MANIFESTS_TAR_HASH. No kube-env key
// names the version: it is whatever the tarball holds (kubernetes/version).
const (
	ServerBinaryTarURL   = "SERVER_BINARY_TAR_URL"
	ServerBinaryTarHash  = "SERVER_BINARY_TAR_HASH"
	KubeManifestsTarURL  = "KUBE_MANIFESTS_TAR_URL"
	KubeManifestsTarHash = "KUBE_MANIFESTS_TAR_HASH"
)

// Release artifact names (cluster/gce/util.sh tars_from_version).
const (
	ServerTarName    = "kubernetes-server-linux-amd64.tar.gz"
	ManifestsTarName = "kubernetes-manifests.tar.gz"
	// VersionFile is the tarball member holding the release's version.
	VersionFile = "kubernetes/version"
)

// DefaultReleaseURL is where tars_from_version takes releases from:
// https://dl.k8s.io/release/${KUBE_VERSION}/kubernetes-server-linux-amd64.tar.gz.
const DefaultReleaseURL = "https://dl.k8s.io/release"

// knownReleaseURLs are the official release locations: dl.k8s.io, and the
// bucket older kube-up (tars_from_version before dl.k8s.io) wrote.
var knownReleaseURLs = []string{DefaultReleaseURL, "https://storage.googleapis.com/kubernetes-release/release"}

// releaseVersionRE is cluster/common.sh KUBE_RELEASE_VERSION_REGEX:
// v1.31.0, v1.32.0-rc.1.
var releaseVersionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-([a-zA-Z0-9]+)\.(0|[1-9][0-9]*))?$`)

// IsReleaseVersion reports whether v is a release version tars_from_version
// maps to a release URL (KUBE_RELEASE_VERSION_REGEX).
func IsReleaseVersion(v string) bool { return releaseVersionRE.MatchString(v) }

// ReleaseVersion is the version a server tarball URL names: v for
// <base>/<v>/kubernetes-server-linux-amd64.tar.gz where base is an
// official release location or one of mirrors; "" for anything else, such
// as kube-up's devel upload (upload-tars: a staging bucket's
// kubernetes-devel/, whose URL carries no version).
func ReleaseVersion(tarURL string, mirrors ...string) string {
	for _, base := range append(append([]string(nil), mirrors...), knownReleaseURLs...) {
		if base == "" {
			continue
		}
		rest, ok := strings.CutPrefix(tarURL, strings.TrimSuffix(base, "/")+"/")
		if !ok {
			continue
		}
		v, name, ok := strings.Cut(rest, "/")
		if ok && name == ServerTarName && IsReleaseVersion(v) {
			return v
		}
	}
	return ""
}

// ReleaseURLs are the server and manifests tarball URLs of version under
// base, as tars_from_version builds them (the manifests URL is the server
// URL with server-linux-amd64 replaced by manifests).
func ReleaseURLs(base, version string) (server, manifests string) {
	server = strings.TrimSuffix(base, "/") + "/" + version + "/" + ServerTarName
	return server, strings.Replace(server, "server-linux-amd64", "manifests", 1)
}

// CheckReleaseBase checks a release base URL (an operator's mirror).
func CheckReleaseBase(base string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q is not an http(s) URL of a release directory such as %s (its <version>/%s is fetched)", base, DefaultReleaseURL, ServerTarName)
	}
	return nil
}

// ReleaseHashes are the published sha512 hashes of a release's tarballs.
type ReleaseHashes struct {
	Server, Manifests string
}

// HasManifests reports whether a master's kube-env has the manifests
// tarball keys (newer kube-up); only then are they rewritten.
func HasManifests(env map[string]string) bool {
	_, ok := env[KubeManifestsTarURL]
	return ok
}

// SetRelease points env at version's release under base, as
// upgrade.sh prepare-upgrade → tars_from_version does: SERVER_BINARY_TAR_URL
// and its hash, and KUBE_MANIFESTS_TAR_URL and its hash when env has the
// manifests keys (a master whose kube-up predates them gets none). Other
// keys are untouched.
func SetRelease(env map[string]string, base, version string, h ReleaseHashes) error {
	if !IsReleaseVersion(version) {
		return fmt.Errorf("%q is not a release version such as v1.31.0", version)
	}
	if h.Server == "" {
		return errors.New("no server tarball hash")
	}
	server, manifests := ReleaseURLs(base, version)
	env[ServerBinaryTarURL], env[ServerBinaryTarHash] = server, h.Server
	if HasManifests(env) {
		if h.Manifests == "" {
			return errors.New("no manifests tarball hash")
		}
		env[KubeManifestsTarURL], env[KubeManifestsTarHash] = manifests, h.Manifests
	}
	return nil
}

var hexRE = regexp.MustCompile(`^[0-9a-f]+$`)

// ParseSHA512File reads a published <tarball>.sha512: the hex digest,
// optionally followed by a file name (sha512sum's format).
func ParseSHA512File(b []byte) (string, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "", errors.New("empty .sha512 file")
	}
	h := strings.ToLower(f[0])
	if len(h) != sha512.Size*2 || !hexRE.MatchString(h) {
		return "", fmt.Errorf(".sha512 file holds %q, not a sha512 hex digest", truncate(f[0], 40))
	}
	return h, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// HashMismatchError is validate-hash's failure: the file's sha1 and
// sha512 both differ from the expected hash.
type HashMismatchError struct {
	Expected, SHA1, SHA512 string
}

func (e *HashMismatchError) Error() string {
	return fmt.Sprintf("sha1 %s/sha512 %s doesn't match expected %s", e.SHA1, e.SHA512, e.Expected)
}

// ValidateHash is configure.sh validate-hash: data is good when its sha1
// or its sha512 (hex) is expected.
func ValidateHash(data []byte, expected string) error {
	s1 := sha1.Sum(data) //nolint:gosec // as validate-hash
	s512 := sha512.Sum512(data)
	h1, h512 := hex.EncodeToString(s1[:]), hex.EncodeToString(s512[:])
	if e := strings.ToLower(strings.TrimSpace(expected)); e == h1 || e == h512 {
		return nil
	}
	return &HashMismatchError{Expected: expected, SHA1: h1, SHA512: h512}
}

// SHA512Hex is a tarball's hash as kube-up writes it (sha512sum).
func SHA512Hex(data []byte) string {
	s := sha512.Sum512(data)
	return hex.EncodeToString(s[:])
}

// TarballVersion reads kubernetes/version from a gzip'd tarball.
func TarballVersion(r io.Reader) (string, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return "", fmt.Errorf("not a gzip'd tarball: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("tarball has no %s", VersionFile)
		}
		if err != nil {
			return "", fmt.Errorf("read tarball: %w", err)
		}
		if strings.TrimPrefix(h.Name, "./") != VersionFile {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 256))
		if err != nil {
			return "", fmt.Errorf("read %s: %w", VersionFile, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("tarball's %s is empty", VersionFile)
		}
		return v, nil
	}
}
