package sandbox

import (
	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/tlsca"
)

// Gateway makes a sandbox's egress proxy the model gateway (DESIGN §6.1,
// Spec.Egress.Gateway): the proxy intercepts TLS to the routes' hosts with
// leaf certificates minted from CA, puts each route's real credentials in
// place of their placeholders, and records every call to those hosts.
// Everything here but CA.CertPEM is a secret: a driver hands it to the
// proxy alone (never on a command line, in a container's environment or
// in the sandbox), and it is never recorded.
type Gateway struct {
	// CA is the run's certificate authority. Its certificate goes into the
	// sandbox (GatewayCAPath); its key only to the proxy.
	CA *tlsca.CA
	// Routes are the providers the proxy serves; their hosts must be on
	// Egress.Allow too.
	Routes []providers.Route
}

// Where a sandbox whose proxy intercepts (Handle.State["gateway_ca"] set)
// holds the run CA's certificate, and the bundle that trusts it beside
// the image's own roots (Archal's contract: /agent-output/ca.crt).
const (
	GatewayCAPath     = "/agent-output/ca.crt"
	GatewayBundlePath = "/agent-output/ca-bundle.crt"
)

// SystemBundles are where images keep their system CA bundle, in the
// order a driver looks (Go's crypto/x509 list for Linux): the first
// regular file found is the base of GatewayBundlePath.
var SystemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Alpine, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine's link, macOS
}

// CAEnv returns the variables that make a command trust the gateway of
// sandbox h: NODE_EXTRA_CA_CERTS (Node adds it to its own roots) set to
// GatewayCAPath, and SSL_CERT_FILE, REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE
// (OpenSSL, Python's requests, curl, Go) set to GatewayBundlePath, which
// still verifies every other host the image's roots verify. It returns nil
// for a sandbox whose proxy does not intercept. Arms add it beside
// ProxyEnv.
func CAEnv(h *Handle) map[string]string {
	if h == nil || h.State["gateway_ca"] == "" {
		return nil
	}
	return map[string]string{
		"NODE_EXTRA_CA_CERTS": GatewayCAPath,
		"SSL_CERT_FILE":       GatewayBundlePath,
		"REQUESTS_CA_BUNDLE":  GatewayBundlePath,
		"CURL_CA_BUNDLE":      GatewayBundlePath,
	}
}

// UpstreamProxy is an operator's proxy (HTTP_PROXY, HTTPS_PROXY,
// NO_PROXY of proctor's environment, credentials included) that the
// egress proxy chains its upstream connections through. It is a secret:
// only the proxy's sidecar holds it.
type UpstreamProxy struct {
	HTTPProxy  string `json:"http_proxy,omitempty"`
	HTTPSProxy string `json:"https_proxy,omitempty"`
	NoProxy    string `json:"no_proxy,omitempty"`
}

// IsZero reports whether u names no proxy.
func (u UpstreamProxy) IsZero() bool { return u.HTTPProxy == "" && u.HTTPSProxy == "" }

// ProxyConfig is the file the egress proxy's sidecar reads its secrets
// from (`proctor proxy --config FILE`, which removes the file once read):
// the gateway's CA and routes, and the upstream proxy. A driver writes it
// into the sidecar's container with mode 0600 before the proxy starts.
type ProxyConfig struct {
	CACert   []byte            `json:"ca_cert,omitempty"`
	CAKey    []byte            `json:"ca_key,omitempty"`
	Routes   []providers.Route `json:"routes,omitempty"`
	Upstream UpstreamProxy     `json:"upstream,omitzero"`
}
