package mvtxdaemon

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestTheWireContractIsNumaflows: a client generated from Numaflow's own
// mvtxdaemon.proto reads a runner only if the service path, the methods'
// message types and every field's number and type are Numaflow's. The
// table is Numaflow's file at numaproj/numaflow 63ba4e8 (and the tags of
// numaflow-pb's generated Rust, which must agree with it), written out
// field by field, so a change to the restated proto that would break
// Numaflow's clients fails here.
func TestTheWireContractIsNumaflows(t *testing.T) {
	fd := File_mvtxdaemon_proto
	if fd.Package() != "mvtxdaemon" {
		t.Fatalf("package %q, want mvtxdaemon", fd.Package())
	}
	svc := fd.Services().ByName("MonoVertexDaemonService")
	if svc == nil {
		t.Fatal("no MonoVertexDaemonService")
	}
	methods := map[string][2]string{
		"GetMonoVertexMetrics": {"google.protobuf.Empty", "mvtxdaemon.GetMonoVertexMetricsResponse"},
		"GetMonoVertexStatus":  {"google.protobuf.Empty", "mvtxdaemon.GetMonoVertexStatusResponse"},
		"GetMonoVertexErrors":  {"mvtxdaemon.GetMonoVertexErrorsRequest", "mvtxdaemon.GetMonoVertexErrorsResponse"},
	}
	if svc.Methods().Len() != len(methods) {
		t.Errorf("%d methods, Numaflow's service has %d", svc.Methods().Len(), len(methods))
	}
	for name, io := range methods {
		m := svc.Methods().ByName(protoreflect.Name(name))
		if m == nil {
			t.Errorf("no method %s", name)
			continue
		}
		if m.IsStreamingClient() || m.IsStreamingServer() || string(m.Input().FullName()) != io[0] || string(m.Output().FullName()) != io[1] {
			t.Errorf("%s: %s -> %s, want unary %s -> %s", name, m.Input().FullName(), m.Output().FullName(), io[0], io[1])
		}
	}
	if got := "/" + string(svc.FullName()) + "/GetMonoVertexErrors"; got != MonoVertexDaemonService_GetMonoVertexErrors_FullMethodName {
		t.Errorf("method path %s", got)
	}
	// message -> field -> "number type", type being the kind, the message
	// name for messages, "map<key,value>" for maps and "repeated " before
	// a list.
	messages := map[string]map[string]string{
		"MonoVertexMetrics": {
			"monoVertex":      "1 string",
			"processingRates": "2 map<string,google.protobuf.DoubleValue>",
			"pendings":        "3 map<string,google.protobuf.Int64Value>",
		},
		"GetMonoVertexMetricsResponse": {"metrics": "1 mvtxdaemon.MonoVertexMetrics"},
		"MonoVertexStatus":             {"status": "1 string", "message": "2 string", "code": "3 string"},
		"GetMonoVertexStatusResponse":  {"status": "1 mvtxdaemon.MonoVertexStatus"},
		"GetMonoVertexErrorsRequest":   {"monoVertex": "1 string"},
		"ContainerError": {
			"container": "1 string", "timestamp": "2 google.protobuf.Timestamp", "code": "3 string",
			"message": "4 string", "details": "5 string",
		},
		"ReplicaErrors":               {"replica": "1 string", "containerErrors": "2 repeated mvtxdaemon.ContainerError"},
		"GetMonoVertexErrorsResponse": {"errors": "1 repeated mvtxdaemon.ReplicaErrors"},
	}
	for name, fields := range messages {
		md := fd.Messages().ByName(protoreflect.Name(name))
		if md == nil {
			t.Errorf("no message %s", name)
			continue
		}
		if md.Fields().Len() != len(fields) {
			t.Errorf("%s has %d fields, Numaflow's %d", name, md.Fields().Len(), len(fields))
		}
		for fname, want := range fields {
			f := md.Fields().ByName(protoreflect.Name(fname))
			if f == nil {
				t.Errorf("%s has no field %s", name, fname)
				continue
			}
			if got := describe(f); got != want {
				t.Errorf("%s.%s: %s, want %s", name, fname, got, want)
			}
		}
	}
}

func describe(f protoreflect.FieldDescriptor) string {
	typ := func(f protoreflect.FieldDescriptor) string {
		if f.Kind() == protoreflect.MessageKind {
			return string(f.Message().FullName())
		}
		return f.Kind().String()
	}
	switch {
	case f.IsMap():
		return fmt.Sprintf("%d map<%s,%s>", f.Number(), typ(f.MapKey()), typ(f.MapValue()))
	case f.IsList():
		return fmt.Sprintf("%d repeated %s", f.Number(), typ(f))
	}
	return fmt.Sprintf("%d %s", f.Number(), typ(f))
}
