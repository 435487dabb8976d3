// Package daemon serves Numaflow's MonoVertex daemon API from a runner, so
// Numaflow's UI server and CLI can read it as they read a MonoVertex: the
// gRPC service MonoVertexDaemonService (GetMonoVertexMetrics,
// GetMonoVertexStatus, GetMonoVertexErrors) and its REST paths, over TLS
// with a self-signed certificate on one port, as Numaflow's daemon serves
// them on 4327 (its clients skip verification). Every value is the engine's
// own, the one /status and /metrics show: nothing is recomputed here.
//
// Numaflow's daemon is a Deployment that scrapes every pod and sums; a
// runner answers for itself, so the values are this replica's (one
// replica: the whole mono vertex).
package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/monovertex/monovertex/internal/numaflowapi/mvtxdaemon"
	"github.com/monovertex/monovertex/runner"
)

// Service answers MonoVertexDaemonService from an engine.
type Service struct {
	mvtxdaemon.UnimplementedMonoVertexDaemonServiceServer
	e *runner.Engine
}

var _ mvtxdaemon.MonoVertexDaemonServiceServer = (*Service)(nil)

// NewService answers for e.
func NewService(e *runner.Engine) *Service { return &Service{e: e} }

// GetMonoVertexMetrics returns the processing rates over 1m, 5m, 15m and
// default (the lookback) and the pending averages of monovtx_pending.
func (s *Service) GetMonoVertexMetrics(context.Context, *emptypb.Empty) (*mvtxdaemon.GetMonoVertexMetricsResponse, error) {
	m := &mvtxdaemon.MonoVertexMetrics{
		MonoVertex:      s.e.Name(),
		ProcessingRates: map[string]*wrapperspb.DoubleValue{},
		Pendings:        map[string]*wrapperspb.Int64Value{},
	}
	for k, v := range s.e.ProcessingRates(time.Now()) {
		m.ProcessingRates[k] = wrapperspb.Double(v)
	}
	for k, v := range s.e.PendingAverages() {
		m.Pendings[k] = wrapperspb.Int64(v)
	}
	return &mvtxdaemon.GetMonoVertexMetricsResponse{Metrics: m}, nil
}

// GetMonoVertexStatus returns the data-flow health.
func (s *Service) GetMonoVertexStatus(context.Context, *emptypb.Empty) (*mvtxdaemon.GetMonoVertexStatusResponse, error) {
	h := s.e.Health()
	return &mvtxdaemon.GetMonoVertexStatusResponse{Status: &mvtxdaemon.MonoVertexStatus{Status: h.Status, Message: h.Message, Code: h.Code}}, nil
}

// GetMonoVertexErrors returns this replica's container errors, named as
// Numaflow's daemon names replicas; none for another mono vertex's name,
// as Numaflow's daemon has none cached for it.
func (s *Service) GetMonoVertexErrors(_ context.Context, req *mvtxdaemon.GetMonoVertexErrorsRequest) (*mvtxdaemon.GetMonoVertexErrorsResponse, error) {
	resp := &mvtxdaemon.GetMonoVertexErrorsResponse{Errors: []*mvtxdaemon.ReplicaErrors{}}
	if req.GetMonoVertex() != "" && req.GetMonoVertex() != s.e.Name() {
		return resp, nil
	}
	for _, r := range s.e.ReplicaErrors() {
		re := &mvtxdaemon.ReplicaErrors{Replica: r.Replica}
		for _, c := range r.ContainerErrors {
			re.ContainerErrors = append(re.ContainerErrors, &mvtxdaemon.ContainerError{
				Container: c.Container, Timestamp: timestamppb.New(c.Timestamp), Code: c.Code, Message: c.Message, Details: c.Details,
			})
		}
		resp.Errors = append(resp.Errors, re)
	}
	return resp, nil
}

// Handler serves the gRPC service to HTTP/2 gRPC requests, the REST paths
// of Numaflow's daemon (/api/v1/metrics, /api/v1/status,
// /api/v1/mono-vertices/{name}/errors) as protojson, and everything else
// from admin (the runner's admin handler: /metrics, /status, ...), as
// Numaflow's daemon multiplexes gRPC and HTTP on its port.
func Handler(svc *Service, admin http.Handler) http.Handler {
	gs := grpc.NewServer()
	mvtxdaemon.RegisterMonoVertexDaemonServiceServer(gs, svc)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		resp, err := svc.GetMonoVertexMetrics(r.Context(), &emptypb.Empty{})
		writeProto(w, resp, err)
	})
	// Numaflow's gateway routes the status by this path and its REST
	// client asks the short one; both answer.
	status := func(w http.ResponseWriter, r *http.Request) {
		resp, err := svc.GetMonoVertexStatus(r.Context(), &emptypb.Empty{})
		writeProto(w, resp, err)
	}
	mux.HandleFunc("GET /api/v1/status", status)
	mux.HandleFunc("GET /api/v1/monovertex/{name}/status", status)
	mux.HandleFunc("GET /api/v1/mono-vertices/{name}/errors", func(w http.ResponseWriter, r *http.Request) {
		resp, err := svc.GetMonoVertexErrors(r.Context(), &mvtxdaemon.GetMonoVertexErrorsRequest{MonoVertex: r.PathValue("name")})
		writeProto(w, resp, err)
	})
	mux.Handle("/", admin)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeProto[T proto.Message](w http.ResponseWriter, m T, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// SelfSigned is a TLS configuration with a fresh self-signed certificate,
// as Numaflow's daemon makes one at start (its clients do not verify it),
// offering HTTP/2 for gRPC and HTTP/1.1 for the REST paths.
func SelfSigned() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"monovertex"}, CommonName: "monovertex daemon"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}, nil
}
