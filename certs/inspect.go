package certs

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// Info is a human- and JSON-friendly summary of a certificate.
type Info struct {
	// Subject is the subject distinguished name, e.g. "CN=etcd-0".
	Subject string `json:"subject"`
	// Issuer is the issuer distinguished name.
	Issuer string `json:"issuer"`
	// DNSNames are the DNS subject alternative names.
	DNSNames []string `json:"dnsNames,omitempty"`
	// IPs are the IP subject alternative names, as strings.
	IPs []string `json:"ips,omitempty"`
	// NotBefore is the start of the validity period.
	NotBefore time.Time `json:"notBefore"`
	// NotAfter is the end of the validity period.
	NotAfter time.Time `json:"notAfter"`
	// SHA256 is the lower-case hex SHA-256 of the certificate's DER.
	SHA256 string `json:"sha256"`
	// IsCA reports whether the certificate is a CA.
	IsCA bool `json:"isCA"`
	// KeyUsage lists the extended key usages hamaster cares about:
	// "server" (ServerAuth) and "client" (ClientAuth).
	KeyUsage []string `json:"keyUsage,omitempty"`
}

// Inspect summarizes the first certificate of certPEM, which must start with
// a CERTIFICATE PEM block.
func Inspect(certPEM []byte) (Info, error) {
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return Info{}, fmt.Errorf("inspect certificate: %w", err)
	}
	return inspect(cert), nil
}

// InspectFile summarizes the first certificate of the PEM file at path.
func InspectFile(path string) (Info, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Info{}, fmt.Errorf("inspect certificate: %w", err)
	}
	cert, err := ParseCertPEM(data)
	if err != nil {
		return Info{}, fmt.Errorf("inspect certificate %s: %w", path, err)
	}
	return inspect(cert), nil
}

func inspect(cert *x509.Certificate) Info {
	info := Info{
		Subject:   cert.Subject.String(),
		Issuer:    cert.Issuer.String(),
		DNSNames:  append([]string(nil), cert.DNSNames...),
		NotBefore: cert.NotBefore,
		NotAfter:  cert.NotAfter,
		SHA256:    fingerprint(cert.Raw),
		IsCA:      cert.IsCA,
	}
	for _, ip := range cert.IPAddresses {
		info.IPs = append(info.IPs, ip.String())
	}
	for _, u := range cert.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			info.KeyUsage = append(info.KeyUsage, "server")
		case x509.ExtKeyUsageClientAuth:
			info.KeyUsage = append(info.KeyUsage, "client")
		}
	}
	return info
}

// SHA256Fingerprint returns the lower-case hex SHA-256 of the DER of the
// first certificate in certPEM, as Info.SHA256 and `openssl x509
// -fingerprint -sha256` (without colons) show it.
func SHA256Fingerprint(certPEM []byte) (string, error) {
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return "", fmt.Errorf("certificate fingerprint: %w", err)
	}
	return fingerprint(cert.Raw), nil
}

func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// NeedsRenewal reports whether cert must be reissued: it expires within
// `within` of now (or has expired), or it lacks any of the wanted DNS names
// or IPs. A wanted DNS name is covered by an equal SAN (case-insensitive,
// trailing dot ignored) or a matching wildcard SAN. reason is a human
// sentence such as "expires in 3d, within the 30d renewal window" or
// "missing SANs: IP 10.1.2.3, DNS lb.example.com", both joined by "; "
// when both apply; it is "" when no renewal is needed. A nil cert always
// needs renewal.
func NeedsRenewal(cert *x509.Certificate, wantDNS []string, wantIPs []net.IP, within time.Duration, now time.Time) (renew bool, reason string) {
	if cert == nil {
		return true, "no certificate"
	}
	var reasons []string
	left := cert.NotAfter.Sub(now)
	switch {
	case left <= 0:
		reasons = append(reasons, fmt.Sprintf("expired %s ago", formatDuration(-left)))
	case left <= within:
		reasons = append(reasons, fmt.Sprintf("expires in %s, within the %s renewal window",
			formatDuration(left), formatDuration(within)))
	}
	var missing []string
	seenIP := make(map[string]bool)
	for _, ip := range wantIPs {
		if ip == nil || seenIP[ip.String()] {
			continue
		}
		seenIP[ip.String()] = true
		if !hasIP(cert, ip) {
			missing = append(missing, "IP "+ip.String())
		}
	}
	seenDNS := make(map[string]bool)
	for _, n := range wantDNS {
		n = normalizeDNSName(n)
		if n == "" || seenDNS[n] {
			continue
		}
		seenDNS[n] = true
		if !hasDNS(cert, n) {
			missing = append(missing, "DNS "+n)
		}
	}
	if len(missing) > 0 {
		reasons = append(reasons, "missing SANs: "+strings.Join(missing, ", "))
	}
	if len(reasons) == 0 {
		return false, ""
	}
	return true, strings.Join(reasons, "; ")
}

func hasIP(cert *x509.Certificate, ip net.IP) bool {
	for _, have := range cert.IPAddresses {
		if have.Equal(ip) {
			return true
		}
	}
	return false
}

// hasDNS reports whether cert is valid for the normalized name n.
func hasDNS(cert *x509.Certificate, n string) bool {
	for _, have := range cert.DNSNames {
		if normalizeDNSName(have) == n {
			return true
		}
	}
	// Wildcard SANs; VerifyHostname would also accept n if it were an IP
	// present in IPAddresses, which the caller asked for as a DNS name, so
	// only use it for names that are not IPs.
	if net.ParseIP(n) != nil {
		return false
	}
	return cert.VerifyHostname(n) == nil
}

// formatDuration renders d (rounded to the minute) compactly: "30d",
// "2d4h", "5h30m", "12m".
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	d = d.Round(time.Minute)
	days := d / (24 * time.Hour)
	hours := (d % (24 * time.Hour)) / time.Hour
	mins := (d % time.Hour) / time.Minute
	switch {
	case days > 0 && hours > 0:
		return fmt.Sprintf("%dd%dh", days, hours)
	case days > 0:
		return fmt.Sprintf("%dd", days)
	case hours > 0 && mins > 0:
		return fmt.Sprintf("%dh%dm", hours, mins)
	case hours > 0:
		return fmt.Sprintf("%dh", hours)
	default:
		return fmt.Sprintf("%dm", mins)
	}
}
