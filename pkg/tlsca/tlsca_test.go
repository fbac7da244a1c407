package tlsca

import (
	"crypto/tls"
	"crypto/x509"
	"sync"
	"testing"
)

func TestMintedLeafVerifiesForItsHostOnly(t *testing.T) {
	ca, err := New("proctor run test")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := ca.Pool()
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMinter(ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"api.anthropic.com", "10.1.2.3"} {
		c, err := m.Cert(host)
		if err != nil {
			t.Fatal(err)
		}
		opts := x509.VerifyOptions{Roots: pool, DNSName: host}
		if _, err := c.Leaf.Verify(opts); err != nil {
			t.Errorf("%s: leaf does not verify: %v", host, err)
		}
		opts.DNSName = "evil.example"
		if _, err := c.Leaf.Verify(opts); err == nil {
			t.Errorf("%s: leaf verifies for another host", host)
		}
		if len(c.Certificate) != 2 {
			t.Errorf("%s: chain of %d, want leaf + CA", host, len(c.Certificate))
		}
	}
	// Another CA's pool does not trust it.
	other, _ := New("other")
	op, _ := other.Pool()
	c, _ := m.Cert("api.anthropic.com")
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: op, DNSName: "api.anthropic.com"}); err == nil {
		t.Error("a leaf verifies under another CA")
	}
}

func TestMinterCachesOneLeafPerHost(t *testing.T) {
	ca, _ := New("c")
	m, _ := NewMinter(ca)
	var wg sync.WaitGroup
	certs := make([]*tls.Certificate, 16)
	for i := range certs {
		wg.Go(func() {
			host := "API.openai.com."
			if i%2 == 1 {
				host = "api.openai.com"
			}
			c, err := m.Cert(host)
			if err != nil {
				t.Error(err)
			}
			certs[i] = c
		})
	}
	wg.Wait()
	for _, c := range certs[1:] {
		if c != certs[0] {
			t.Fatal("two leaves minted for one host")
		}
	}
	if m.Minted() != 1 {
		t.Errorf("minted %d, want 1", m.Minted())
	}
}

func TestNewMinterRefusesALeafAsCA(t *testing.T) {
	ca, _ := New("c")
	cert, key, err := ServerCert(ca, "model.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMinter(&CA{CertPEM: cert, KeyPEM: key}); err == nil {
		t.Error("a leaf certificate accepted as a CA")
	}
	if _, err := NewMinter(&CA{CertPEM: []byte("junk"), KeyPEM: ca.KeyPEM}); err == nil {
		t.Error("junk accepted as a CA certificate")
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		t.Errorf("ServerCert's PEM is not a key pair: %v", err)
	}
}
