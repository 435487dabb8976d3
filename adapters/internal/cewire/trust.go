package cewire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Trust is the set of certificate authorities the CloudEvents clients
// verify https:// receivers against: the system's, plus those of
// K_CA_CERTS, which Knative injects into an adapter when its cluster runs
// with transport-encryption (the CA of its Brokers' and Channels'
// certificates: knative.dev/eventing pkg/adapter/v2/cloudevents.go hands
// it to eventingtls as ClientConfig.CACerts, added to the system pool).
//
// K_CA_CERTS holds the PEM itself, as Knative sets it; a value that is not
// PEM is taken as the path of a PEM file (a mounted ConfigMap or Secret),
// read again whenever it changes, so a rotated CA is trusted without a
// restart. The file is looked at as each new connection's handshake
// verifies the server: connections are kept alive, so that is seldom.
type Trust struct {
	path string
	mu   sync.Mutex
	pool *x509.CertPool
	// seen is the file's version pool was made from.
	seen fileStamp
	// stale is why the file could not be read again, said once in the
	// handshake errors while it lasts; the last pool stays in use.
	stale error
}

// LoadTrust reads K_CA_CERTS (v): nil for "" (the system's CAs only, as
// without Trust), else a Trust, or an error saying what is wrong with v.
func LoadTrust(v string) (*Trust, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	t := &Trust{}
	if !strings.Contains(v, "-----BEGIN") {
		t.path = v
		if err := t.reload(); err != nil {
			return nil, err
		}
		return t, nil
	}
	pool, err := poolWith([]byte(v))
	if err != nil {
		return nil, err
	}
	t.pool = pool
	return t, nil
}

// poolWith is the system pool with the certificates of pem added.
func poolWith(pem []byte) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("holds no PEM certificate: set it to the CA's certificate (-----BEGIN CERTIFICATE----- ...) or the path of a file holding it")
	}
	return pool, nil
}

// reload reads the file again if it changed; the caller holds mu or is
// the constructor.
func (t *Trust) reload() error {
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("is neither PEM nor a readable file: %w", err)
	}
	if t.pool != nil && t.seen.same(fi) {
		return nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("is neither PEM nor a readable file: %w", err)
	}
	pool, err := poolWith(b)
	if err != nil {
		return fmt.Errorf("file %s %w", t.path, err)
	}
	t.pool, t.seen = pool, stampOf(fi)
	return nil
}

// current is the pool to verify with now.
func (t *Trust) current() (*x509.CertPool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.path != "" {
		// A file being rewritten may be caught half written: keep the
		// pool made from the last whole one and say why.
		t.stale = t.reload()
	}
	return t.pool, t.stale
}

// TLSConfig is the client TLS configuration that verifies servers against
// the trust's current pool. crypto/tls reads RootCAs once per config, so
// the check is made here, as crypto/tls's own verifyServerCertificate
// makes it (chain to a root, server usage, the name dialled).
func (t *Trust) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verified in VerifyConnection against the pool of the moment;
		// crypto/tls's own check would use a pool fixed at start.
		InsecureSkipVerify: true, //nolint:gosec // verified below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			pool, stale := t.current()
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: pool, Intermediates: inter, DNSName: cs.ServerName,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if err != nil {
				if stale != nil {
					err = fmt.Errorf("%w (K_CA_CERTS %v; the CAs read before are used)", err, stale)
				}
				return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
			}
			return nil
		},
	}
}

// fileStamp is the version of a file that a kubelet or a controller
// rewrites in place (a mounted Secret, a projected token): its modification
// time and size, compared before reading it again.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(fi os.FileInfo) fileStamp { return fileStamp{fi.ModTime(), fi.Size()} }

// same reports whether fi is the version s was taken from.
func (s fileStamp) same(fi os.FileInfo) bool { return fi.ModTime().Equal(s.mod) && fi.Size() == s.size }
