// Package tlsca is the certificate authority of the model gateway (DESIGN
// §6.1): a CA proctor makes for a run (New), the leaf certificates the
// intercepting proxy mints from it per host on demand (Minter), and the
// same two for tests that serve a scripted model over HTTPS under a name
// of their own.
//
// Keys are ECDSA P-256. Nothing here touches a file: the caller decides
// where the PEM goes (the CA's certificate into a task container, its key
// only to the proxy's sidecar).
package tlsca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"time"
)

// CA is a certificate authority: its certificate and private key as PEM.
// The zero value is not a CA.
type CA struct {
	// CertPEM is the CA certificate ("CERTIFICATE" block).
	CertPEM []byte
	// KeyPEM is the CA's private key ("PRIVATE KEY" block, PKCS #8). It
	// is a secret: it goes to the proxy and nowhere else.
	KeyPEM []byte
}

// Validity of what New and Minter make. A CA lives longer than any run
// (runs are bounded by their cells' lifetimes); leaves are minted per
// sidecar and only need to outlive it.
const (
	CAValidity   = 7 * 24 * time.Hour
	LeafValidity = 48 * time.Hour
	// backdate absorbs clock skew between this machine and a container.
	backdate = time.Hour
)

// New makes a CA whose subject common name is name ("proctor run <id>").
// It may sign only leaf certificates (path length 0).
func New(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"proctor"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// Pool returns a certificate pool holding the CA certificate.
func (ca *CA) Pool() (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(ca.CertPEM) {
		return nil, errors.New("tlsca: no certificate in the CA's PEM")
	}
	return p, nil
}

// parse returns the CA's certificate and signer.
func (ca *CA) parse() (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(ca.CertPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("tlsca: the CA certificate is not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsca: the CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, nil, errors.New("tlsca: the certificate is not a CA")
	}
	kb, _ := pem.Decode(ca.KeyPEM)
	if kb == nil {
		return nil, nil, errors.New("tlsca: the CA key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if ek, eerr := x509.ParseECPrivateKey(kb.Bytes); eerr == nil {
			k = ek
		} else {
			return nil, nil, fmt.Errorf("tlsca: the CA key: %w", err)
		}
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("tlsca: the CA key cannot sign")
	}
	return cert, signer, nil
}

// Minter mints leaf certificates for host names (or IP literals) signed by
// a CA, each once: a host's certificate is cached for the Minter's life.
// Its methods are safe for concurrent use.
type Minter struct {
	cert   *x509.Certificate
	signer crypto.Signer
	key    crypto.Signer // the key of every leaf (one per Minter)
	keyDER []byte

	mu    sync.Mutex
	cache map[string]*mintCall
}

type mintCall struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// NewMinter returns a Minter for ca. Every leaf shares one fresh P-256
// key, made here: minting a leaf is then one signature (about 50 µs).
func NewMinter(ca *CA) (*Minter, error) {
	cert, signer, err := ca.parse()
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Minter{cert: cert, signer: signer, key: key, cache: map[string]*mintCall{}}, nil
}

// Cert returns the leaf certificate for host (a DNS name, or an IP
// literal, which gets an IP SAN), chained to the CA, minting it on the
// first call for host. host is compared case-insensitively.
func (m *Minter) Cert(host string) (*tls.Certificate, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return nil, errors.New("tlsca: empty host")
	}
	m.mu.Lock()
	c, ok := m.cache[host]
	if !ok {
		c = &mintCall{done: make(chan struct{})}
		m.cache[host] = c
	}
	m.mu.Unlock()
	if ok {
		<-c.done
		return c.cert, c.err
	}
	c.cert, c.err = m.mint(host)
	close(c.done)
	return c.cert, c.err
}

// Minted returns how many leaves were minted (cache entries).
func (m *Minter) Minted() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cache)
}

func (m *Minter) mint(host string) (*tls.Certificate, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(LeafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	if tmpl.NotAfter.After(m.cert.NotAfter) {
		tmpl.NotAfter = m.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, m.cert, m.key.Public(), m.signer)
	if err != nil {
		return nil, fmt.Errorf("tlsca: mint a certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, m.cert.Raw}, PrivateKey: m.key, Leaf: leaf}, nil
}

// ServerCert mints one leaf for hosts (names or IP literals) signed by ca
// and returns it as PEM (certificate chain, key): a test endpoint's
// certificate under a name of the test's own.
func ServerCert(ca *CA, hosts ...string) (certPEM, keyPEM []byte, err error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("tlsca: no host")
	}
	cert, signer, err := ca.parse()
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(LeafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, cert, key.Public(), signer)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	certPEM = append(certPEM, ca.CertPEM...)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}
