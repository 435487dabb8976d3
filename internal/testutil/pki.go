package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// PKI is a test CA with a server certificate for 127.0.0.1 and a client
// certificate it signed, all as PEM, for TLS tests of brokers on loopback.
type PKI struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey []byte
}

// NewPKI makes a PKI valid for a day.
func NewPKI(t testing.TB) PKI {
	t.Helper()
	ca := NewTestCA(t)
	p := PKI{CA: ca.PEM}
	p.ServerCert, p.ServerKey = ca.Issue("broker", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.ClientCert, p.ClientKey = ca.Issue("relay", x509.ExtKeyUsageClientAuth, nil)
	return p
}

// TestCA is a CA valid for a day that issues certificates, for tests that
// need more than PKI's two (servers named by DNS, as in a cluster).
type TestCA struct {
	// PEM is the CA's certificate.
	PEM    []byte
	t      testing.TB
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	serial int64
	now    time.Time
}

// NewTestCA makes a CA.
func NewTestCA(t testing.TB) *TestCA {
	t.Helper()
	ca := &TestCA{t: t, key: newKey(t), serial: 1, now: time.Now()}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "monovertex test CA"}, NotBefore: ca.now.Add(-time.Hour), NotAfter: ca.now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.PEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return ca
}

// Issue returns a certificate for cn with the usage, valid for the IPs
// and DNS names given, and its key (PKCS #8), both PEM.
func (ca *TestCA) Issue(cn string, usage x509.ExtKeyUsage, ips []net.IP, dns ...string) (cert, key []byte) {
	ca.t.Helper()
	ca.serial++
	k := newKey(ca.t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: cn}, NotBefore: ca.now.Add(-time.Hour), NotAfter: ca.now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips, DNSNames: dns}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		ca.t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// StartTLSServer serves h over https on 127.0.0.1 with the PKI's server
// certificate, until the test ends, and returns its URL.
func StartTLSServer(t testing.TB, p PKI, h http.Handler) string {
	t.Helper()
	cert, err := tls.X509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}
