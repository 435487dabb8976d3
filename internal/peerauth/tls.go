// Package peerauth holds the settings blocks with which the Kafka, NATS and
// JetStream adapters prove themselves to a server and check it, declared
// once and embedded in each adapter's settings under its prefix: a client
// TLS setting made of files (Numaflow's tls: insecureSkipVerify,
// caCertSecret, certSecret and keySecret, with the Secrets mounted and
// named by path), turned into a tls.Config with errors that name the
// variable, and a user name and password.
package peerauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"

	"github.com/monovertex/monovertex/runner"
)

// TLSFiles is a client TLS setting as an adapter's settings embed it under
// their prefix: <prefix>_TLS, _TLS_CA_FILE, _TLS_CERT_FILE, _TLS_KEY_FILE
// and _TLS_SKIP_VERIFY. The methods take the prefix, for errors that name
// the variable.
type TLSFiles struct {
	TLS           bool   `envconfig:"TLS" default:"false" desc:"connect with TLS (implied by any other {PREFIX}_TLS_* setting)"`
	TLSCAFile     string `envconfig:"TLS_CA_FILE" desc:"PEM file of a CA that signed the servers' certificates: Kafka trusts it instead of the system roots (empty: the system roots), NATS besides them (as Numaflow does)"`
	TLSCertFile   string `envconfig:"TLS_CERT_FILE" desc:"PEM client certificate for mutual TLS (with {PREFIX}_TLS_KEY_FILE)"`
	TLSKeyFile    string `envconfig:"TLS_KEY_FILE" desc:"PEM private key of {PREFIX}_TLS_CERT_FILE"`
	TLSSkipVerify bool   `envconfig:"TLS_SKIP_VERIFY" default:"false" desc:"accept any server certificate (testing only)"`
}

// Enabled reports whether TLS is on: asked for, or implied by any file or
// by skipping verification.
func (f TLSFiles) Enabled() bool {
	return f.TLS || f.TLSCAFile != "" || f.TLSCertFile != "" || f.TLSKeyFile != "" || f.TLSSkipVerify
}

// Validate checks that the files pair up, exist and parse.
func (f TLSFiles) Validate(prefix string) error {
	if (f.TLSCertFile == "") != (f.TLSKeyFile == "") {
		if f.TLSCertFile == "" {
			return &runner.ConfigError{Var: prefix + "_TLS_CERT_FILE", Value: "", Reason: "is required with " + prefix + "_TLS_KEY_FILE"}
		}
		return &runner.ConfigError{Var: prefix + "_TLS_KEY_FILE", Value: "", Reason: "is required with " + prefix + "_TLS_CERT_FILE"}
	}
	for _, file := range []struct{ suffix, path string }{{"_TLS_CA_FILE", f.TLSCAFile}, {"_TLS_CERT_FILE", f.TLSCertFile}, {"_TLS_KEY_FILE", f.TLSKeyFile}} {
		if file.path == "" {
			continue
		}
		if _, err := os.Stat(file.path); err != nil {
			return &runner.ConfigError{Var: prefix + file.suffix, Value: file.path, Reason: "cannot be read: " + errors.Unwrap(err).Error()}
		}
	}
	_, err := f.Config(prefix, false)
	return err
}

// Config builds the TLS configuration, nil when TLS is off. With addCA the
// CA file is trusted besides the system's roots rather than instead of
// them (numaflow-nats builds its root store so).
func (f TLSFiles) Config(prefix string, addCA bool) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.TLSSkipVerify} //nolint:gosec // the user asked for it
	if f.TLSCAFile != "" {
		pem, err := os.ReadFile(f.TLSCAFile)
		if err != nil {
			return nil, &runner.ConfigError{Var: prefix + "_TLS_CA_FILE", Value: f.TLSCAFile, Reason: "cannot be read: " + err.Error()}
		}
		pool := x509.NewCertPool()
		if addCA {
			if sys, err := x509.SystemCertPool(); err == nil {
				pool = sys
			}
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &runner.ConfigError{Var: prefix + "_TLS_CA_FILE", Value: f.TLSCAFile, Reason: "holds no PEM certificate"}
		}
		cfg.RootCAs = pool
	}
	if f.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.TLSCertFile, f.TLSKeyFile)
		if err != nil {
			return nil, &runner.ConfigError{Var: prefix + "_TLS_CERT_FILE", Value: f.TLSCertFile, Reason: "with " + prefix + "_TLS_KEY_FILE is not a usable key pair: " + err.Error()}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
