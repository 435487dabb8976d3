package udsink

import (
	commonpb "github.com/numaproj/numaflow-go/pkg/apis/proto/common"

	"github.com/monovertex/monovertex/runner"
)

// metadataToProto converts the engine's metadata to Numaflow's
// common.Metadata. nil stays nil, as numaflow-core leaves the field unset
// for a message without metadata.
func metadataToProto(md *runner.Metadata) *commonpb.Metadata {
	if md == nil {
		return nil
	}
	return &commonpb.Metadata{
		PreviousVertex: md.PreviousVertex,
		SysMetadata:    groupsToProto(md.System),
		UserMetadata:   groupsToProto(md.User),
	}
}

// metadataFromProto converts Numaflow's common.Metadata to the engine's;
// nil stays nil.
func metadataFromProto(md *commonpb.Metadata) *runner.Metadata {
	if md == nil {
		return nil
	}
	return &runner.Metadata{
		PreviousVertex: md.GetPreviousVertex(),
		System:         groupsFromProto(md.GetSysMetadata()),
		User:           groupsFromProto(md.GetUserMetadata()),
	}
}

func groupsToProto(g map[string]map[string][]byte) map[string]*commonpb.KeyValueGroup {
	if g == nil {
		return nil
	}
	out := make(map[string]*commonpb.KeyValueGroup, len(g))
	for name, kv := range g {
		// The maps are shared, not copied: the request is marshalled before
		// anyone could change them, and the engine never changes values in place.
		out[name] = &commonpb.KeyValueGroup{KeyValue: kv}
	}
	return out
}

func groupsFromProto(g map[string]*commonpb.KeyValueGroup) map[string]map[string][]byte {
	if g == nil {
		return nil
	}
	out := make(map[string]map[string][]byte, len(g))
	for name, kv := range g {
		m := make(map[string][]byte, len(kv.GetKeyValue()))
		for k, v := range kv.GetKeyValue() {
			m[k] = v
		}
		out[name] = m
	}
	return out
}
