// Package tlsfiles turns a client TLS setting made of files (Numaflow's
// tls: insecureSkipVerify, caCertSecret, certSecret and keySecret, with the
// Secrets mounted and named by path) into a tls.Config, with errors that
// name the variable, so the Kafka and JetStream adapters read TLS alike.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"

	"github.com/monovertex/monovertex/runner"
)

// Files is one client TLS setting. Its variables are Prefix+"_TLS",
// "_TLS_CA_FILE", "_TLS_CERT_FILE", "_TLS_KEY_FILE", "_TLS_SKIP_VERIFY".
type Files struct {
	Prefix     string
	On         bool
	CAFile     string
	CertFile   string
	KeyFile    string
	SkipVerify bool
	// AddCA trusts the CA file besides the system's roots rather than
	// instead of them (numaflow-nats builds its root store so).
	AddCA bool
}

// Enabled reports whether TLS is on: asked for, or implied by any file or
// by skipping verification.
func (f Files) Enabled() bool {
	return f.On || f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" || f.SkipVerify
}

// Validate checks that the files pair up, exist and parse.
func (f Files) Validate() error {
	if (f.CertFile == "") != (f.KeyFile == "") {
		if f.CertFile == "" {
			return &runner.ConfigError{Var: f.Prefix + "_TLS_CERT_FILE", Value: "", Reason: "is required with " + f.Prefix + "_TLS_KEY_FILE"}
		}
		return &runner.ConfigError{Var: f.Prefix + "_TLS_KEY_FILE", Value: "", Reason: "is required with " + f.Prefix + "_TLS_CERT_FILE"}
	}
	for _, file := range []struct{ suffix, path string }{{"_TLS_CA_FILE", f.CAFile}, {"_TLS_CERT_FILE", f.CertFile}, {"_TLS_KEY_FILE", f.KeyFile}} {
		if file.path == "" {
			continue
		}
		if _, err := os.Stat(file.path); err != nil {
			return &runner.ConfigError{Var: f.Prefix + file.suffix, Value: file.path, Reason: "cannot be read: " + errors.Unwrap(err).Error()}
		}
	}
	_, err := f.Config()
	return err
}

// Config builds the TLS configuration, nil when TLS is off.
func (f Files) Config() (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.SkipVerify} //nolint:gosec // the user asked for it
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, &runner.ConfigError{Var: f.Prefix + "_TLS_CA_FILE", Value: f.CAFile, Reason: "cannot be read: " + err.Error()}
		}
		pool := x509.NewCertPool()
		if f.AddCA {
			if sys, err := x509.SystemCertPool(); err == nil {
				pool = sys
			}
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &runner.ConfigError{Var: f.Prefix + "_TLS_CA_FILE", Value: f.CAFile, Reason: "holds no PEM certificate"}
		}
		cfg.RootCAs = pool
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, &runner.ConfigError{Var: f.Prefix + "_TLS_CERT_FILE", Value: f.CertFile, Reason: "with " + f.Prefix + "_TLS_KEY_FILE is not a usable key pair: " + err.Error()}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
