package peerauth

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestAddCAKeepsTheSystemRoots: numaflow-nats trusts a caCertSecret
// besides the system's roots; Kafka's files replace them. The system
// roots here are one test CA (SSL_CERT_FILE, read once per process: no
// other test of this package loads them), the file another.
func TestAddCAKeepsTheSystemRoots(t *testing.T) {
	system, file := testutil.NewPKI(t), testutil.NewPKI(t)
	dir := t.TempDir()
	systemCA, fileCA := filepath.Join(dir, "system.pem"), filepath.Join(dir, "file.pem")
	if err := os.WriteFile(systemCA, system.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fileCA, file.CA, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", systemCA)
	t.Setenv("SSL_CERT_DIR", dir+"/none")
	verifies := func(f TLSFiles, addCA bool, server []byte) bool {
		cfg, err := f.Config("MV_X", addCA)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(server)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cert.Verify(x509.VerifyOptions{Roots: cfg.RootCAs})
		return err == nil
	}
	f := TLSFiles{TLSCAFile: fileCA}
	if !verifies(f, true, file.ServerCert) || !verifies(f, true, system.ServerCert) {
		t.Fatal("with AddCA, both the file's CA and the system's roots must be trusted")
	}
	if !verifies(f, false, file.ServerCert) || verifies(f, false, system.ServerCert) {
		t.Fatal("without AddCA, only the file's CA must be trusted")
	}
}
