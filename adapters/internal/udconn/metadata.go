package udconn

import (
	"github.com/numaproj/numaflow-go/pkg/apis/proto/common"

	"github.com/monovertex/monovertex/runner"
)

// MetadataToProto is md in Numaflow's wire form, for a request to a
// container; nil when md carries nothing.
func MetadataToProto(md *runner.Metadata) *common.Metadata {
	if md == nil || (md.PreviousVertex == "" && len(md.User) == 0 && len(md.System) == 0) {
		return nil
	}
	return &common.Metadata{
		PreviousVertex: md.PreviousVertex,
		UserMetadata:   groupsToProto(md.User),
		SysMetadata:    groupsToProto(md.System),
	}
}

// MetadataFromProto is the wire form p as runner metadata; nil when p
// carries nothing (the SDKs send an empty Metadata for "none").
func MetadataFromProto(p *common.Metadata) *runner.Metadata {
	if p == nil {
		return nil
	}
	md := &runner.Metadata{
		PreviousVertex: p.GetPreviousVertex(),
		User:           groupsFromProto(p.GetUserMetadata()),
		System:         groupsFromProto(p.GetSysMetadata()),
	}
	if md.PreviousVertex == "" && md.User == nil && md.System == nil {
		return nil
	}
	return md
}

func groupsToProto(g map[string]map[string][]byte) map[string]*common.KeyValueGroup {
	if len(g) == 0 {
		return nil
	}
	out := make(map[string]*common.KeyValueGroup, len(g))
	for name, kv := range g {
		out[name] = &common.KeyValueGroup{KeyValue: kv}
	}
	return out
}

// groupsFromProto keeps empty groups (a UDF may create a group before it
// fills it) and copies the maps, so the message does not share them with
// the decoded response.
func groupsFromProto(g map[string]*common.KeyValueGroup) map[string]map[string][]byte {
	if len(g) == 0 {
		return nil
	}
	out := make(map[string]map[string][]byte, len(g))
	for name, grp := range g {
		kv := make(map[string][]byte, len(grp.GetKeyValue()))
		for k, v := range grp.GetKeyValue() {
			kv[k] = v
		}
		out[name] = kv
	}
	return out
}

// OutputMetadata is the metadata of an output a transformer or map UDF
// returned for input metadata in, by numaflow-core's rule
// (transformer/user_defined.rs and mapper/map.rs, UserDefinedMessage): the
// system metadata is the input's, read-only to the container; the user
// metadata is what the container returned (resp), replacing the input's,
// so a container that returns none leaves its output without user
// metadata. The previous vertex stays the input's. nil when there is
// nothing to carry.
func OutputMetadata(in *runner.Metadata, resp *common.Metadata) *runner.Metadata {
	var user map[string]map[string][]byte
	if got := MetadataFromProto(resp); got != nil {
		user = got.User
	}
	if in == nil {
		if user == nil {
			return nil
		}
		return &runner.Metadata{User: user}
	}
	md := in.Clone()
	md.User = user
	return md
}
