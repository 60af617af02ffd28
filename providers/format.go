package providers

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"github.com/hamaster/hamaster/errkind"
)

// Format is how a master's template is written on its machine and read
// back. It is the flavor's (package flavors), not the provider's: what a
// master reads at boot is its format (kube-up's kube-env and
// kube-master-certs), and a version is what that format boots (a kube-up
// master's release tarball). A provider that keeps a template as named
// documents on the machine (GCE: an instance's metadata items) stores
// what Encode returns and hands Decode what a machine carries; the
// documents the format does not own stay the provider's, copied verbatim
// when cloning (Template.Machine).
type Format interface {
	// Owns reports whether the document named key is the format's.
	Owns(key string) bool
	// Encode renders t's Version, ExtraArgs, Env and Files as documents.
	// It may fetch (a kube-up master's new version is its release's
	// tarball URLs and their published hashes), and providers call it
	// before they change anything, so a version that cannot be had
	// changes nothing. A version or a file the format cannot write is
	// errkind.InvalidArgument, naming the flag or field.
	Encode(ctx context.Context, t Template) (map[string]string, error)
	// Decode reads Version, ExtraArgs, Env and Files from the documents
	// the format owns (any others in docs are ignored); a machine with
	// none of them decodes to an empty template.
	Decode(docs map[string]string) (Template, error)
}

// Formatted is implemented by providers whose machines carry their
// template as documents a Format writes (gce, aws). Binding the cluster's
// flavor to the provider sets it (flavors/registry.Bind; its Attach is
// SetFormat's only caller), before any machine is read; until then
// reading or writing a template is errkind.FailedPrecondition.
type Formatted interface {
	// Carrier is how the machines carry documents: CarrierMetadata or
	// CarrierUserData.
	Carrier() string
	SetFormat(Format)
}

// Carriers (Formatted.Carrier).
const (
	// CarrierMetadata: any number of named documents (a GCE instance's
	// metadata items).
	CarrierMetadata = "metadata"
	// CarrierUserData: one document, DocUserData (an EC2 instance's user
	// data, not base64-encoded).
	CarrierUserData = "user-data"
)

// DocUserData is the one document of CarrierUserData.
const DocUserData = "user-data"

// ReleaseSource is implemented by providers whose masters download their
// release at boot from a directory the operator may set (a GCE mirror of
// dl.k8s.io: --gce-release-url): a flavor writing a new version points
// the master there.
type ReleaseSource interface {
	// ReleaseURL is the release directory ("" for the flavor's default,
	// dl.k8s.io) and the option that sets it, for errors.
	ReleaseURL() (base, option string)
}

// CheckHTTPURL validates an option holding the http(s) URL of a
// directory: a scheme, a host, no query or fragment.
func CheckHTTPURL(option, v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--%s: %q is not an http(s) URL of a directory (scheme and host, no query or fragment)", option, v)
	}
	return nil
}

// FormatSlot holds the Format a flavor sets: a provider embeds it to
// implement Formatted's SetFormat.
type FormatSlot struct {
	mu sync.Mutex
	f  Format
}

// SetFormat implements Formatted.
func (s *FormatSlot) SetFormat(f Format) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f = f
}

// TemplateFormat is the format set, or errkind.FailedPrecondition naming
// provider when none is (a wiring bug: flavors/registry.Open sets it).
func (s *FormatSlot) TemplateFormat(provider string) (Format, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil, errkind.Errorf(errkind.FailedPrecondition, "%s: no master format set: the cluster's flavor sets it when it is opened (flavors/registry.Open)", provider)
	}
	return s.f, nil
}
