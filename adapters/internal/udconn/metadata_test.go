package udconn_test

import (
	"reflect"
	"testing"

	"github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	"google.golang.org/protobuf/proto"

	"github.com/monovertex/monovertex/adapters/internal/udconn"
	"github.com/monovertex/monovertex/runner"
)

func TestMetadataRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		md   *runner.Metadata
	}{
		{"user and system groups", &runner.Metadata{
			PreviousVertex: "in",
			User:           map[string]map[string][]byte{"example": {"n": []byte("7")}, "other": {"a": []byte("1"), "b": {}}},
			System:         map[string]map[string][]byte{"sink": {"retry_count": []byte("0")}},
		}},
		{"only user", &runner.Metadata{User: map[string]map[string][]byte{"g": {"k": []byte("v")}}}},
		{"only system", &runner.Metadata{System: map[string]map[string][]byte{"g": {"k": []byte("v")}}}},
		{"only the previous vertex", &runner.Metadata{PreviousVertex: "source"}},
		{"an empty group is kept", &runner.Metadata{User: map[string]map[string][]byte{"g": {}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := udconn.MetadataToProto(c.md)
			// Through the wire, as a container sees it.
			b, err := proto.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var back common.Metadata
			if err := proto.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			got := udconn.MetadataFromProto(&back)
			if !reflect.DeepEqual(normalize(got), normalize(c.md)) {
				t.Fatalf("round trip: got %+v, want %+v", got, c.md)
			}
		})
	}
}

// normalize makes nil and empty byte values equal (protobuf does not tell
// them apart).
func normalize(md *runner.Metadata) *runner.Metadata {
	if md == nil {
		return nil
	}
	md = md.Clone()
	for _, g := range []map[string]map[string][]byte{md.User, md.System} {
		for _, kv := range g {
			for k, v := range kv {
				if len(v) == 0 {
					kv[k] = []byte{}
				}
			}
		}
	}
	return md
}

func TestEmptyMetadataIsNil(t *testing.T) {
	if p := udconn.MetadataToProto(nil); p != nil {
		t.Errorf("MetadataToProto(nil) = %v, want nil", p)
	}
	if p := udconn.MetadataToProto(&runner.Metadata{User: map[string]map[string][]byte{}}); p != nil {
		t.Errorf("MetadataToProto(empty) = %v, want nil", p)
	}
	if md := udconn.MetadataFromProto(nil); md != nil {
		t.Errorf("MetadataFromProto(nil) = %+v, want nil", md)
	}
	// What numaflow-go sends for an output without user metadata.
	sdkEmpty := &common.Metadata{SysMetadata: map[string]*common.KeyValueGroup{}, UserMetadata: map[string]*common.KeyValueGroup{}}
	if md := udconn.MetadataFromProto(sdkEmpty); md != nil {
		t.Errorf("MetadataFromProto(empty) = %+v, want nil", md)
	}
}

func TestMetadataFromProtoDoesNotShareMaps(t *testing.T) {
	p := &common.Metadata{UserMetadata: map[string]*common.KeyValueGroup{"g": {KeyValue: map[string][]byte{"k": []byte("v")}}}}
	md := udconn.MetadataFromProto(p)
	md.User["g"]["k2"] = []byte("x")
	if _, leaked := p.UserMetadata["g"].KeyValue["k2"]; leaked {
		t.Fatal("a change to the runner metadata changed the decoded response")
	}
}

func TestOutputMetadata(t *testing.T) {
	in := &runner.Metadata{
		PreviousVertex: "source",
		User:           map[string]map[string][]byte{"in": {"k": []byte("v")}},
		System:         map[string]map[string][]byte{"sys": {"k": []byte("v")}},
	}
	resp := &common.Metadata{
		UserMetadata: map[string]*common.KeyValueGroup{"out": {KeyValue: map[string][]byte{"n": []byte("1")}}},
		// A container cannot change system metadata: this is ignored.
		SysMetadata: map[string]*common.KeyValueGroup{"sys": {KeyValue: map[string][]byte{"k": []byte("forged")}}},
	}
	sdkNone := &common.Metadata{SysMetadata: map[string]*common.KeyValueGroup{}, UserMetadata: map[string]*common.KeyValueGroup{}}
	cases := []struct {
		name string
		in   *runner.Metadata
		resp *common.Metadata
		want *runner.Metadata
	}{
		{"user from the container, system from the input", in, resp, &runner.Metadata{
			PreviousVertex: "source",
			User:           map[string]map[string][]byte{"out": {"n": []byte("1")}},
			System:         map[string]map[string][]byte{"sys": {"k": []byte("v")}},
		}},
		{"no user metadata back drops the input's", in, sdkNone, &runner.Metadata{
			PreviousVertex: "source",
			System:         map[string]map[string][]byte{"sys": {"k": []byte("v")}},
		}},
		{"nothing in, nothing back", nil, nil, nil},
		{"nothing in, user back", nil, resp, &runner.Metadata{User: map[string]map[string][]byte{"out": {"n": []byte("1")}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := udconn.OutputMetadata(c.in, c.resp)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
	got := udconn.OutputMetadata(in, resp)
	got.System["sys"]["k"] = []byte("changed")
	if string(in.System["sys"]["k"]) != "v" {
		t.Fatal("the output shares its system metadata with the input")
	}
}
