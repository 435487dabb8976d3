package udconn

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/monovertex/monovertex/runner"
)

// nackMapField is nack_map's field number in Numaflow's
// common.NackOptions (map<string, string> nack_map = 4), which
// numaflow-go v0.12.0's generated type lacks: the runner reads it from,
// and writes it as, the message's unknown fields, so a container whose
// SDK has it sees it as numaflow-core sends it.
const nackMapField protowire.Number = 4

// NackFromProto is what a container's NackOptions asked for, as the
// engine carries it to the source: the delay (milliseconds on the wire),
// the reason, max_deliveries and nack_map.
func NackFromProto(o *common.NackOptions) runner.Nack {
	if o == nil {
		return runner.Nack{}
	}
	n := runner.Nack{Delay: millis(o.GetDelay()), Reason: o.GetReason(), MaxDeliveries: o.GetMaxDeliveries()}
	n.Map = readNackMap(o.ProtoReflect().GetUnknown())
	return n
}

// NackToProto is n as Numaflow's NackOptions, for a source's NackFn:
// only what was asked for is set, as numaflow-core sets it.
func NackToProto(n runner.Nack) *common.NackOptions {
	o := &common.NackOptions{}
	if n.Delay > 0 {
		ms := uint64(n.Delay / time.Millisecond)
		o.Delay = &ms
	}
	if n.Reason != "" {
		o.Reason = &n.Reason
	}
	if n.MaxDeliveries > 0 {
		o.MaxDeliveries = &n.MaxDeliveries
	}
	if len(n.Map) > 0 {
		o.ProtoReflect().SetUnknown(appendNackMap(nil, n.Map))
	}
	return o
}

// millis converts a delay in milliseconds, saturating.
func millis(ms uint64) time.Duration {
	if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// readNackMap decodes the nack_map entries among unknown fields; other
// unknown fields and malformed entries are skipped.
func readNackMap(b []byte) map[string]string {
	var m map[string]string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return m
		}
		b = b[n:]
		if num != nackMapField || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return m
			}
			b = b[n:]
			continue
		}
		entry, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return m
		}
		b = b[n:]
		var k, v string
		for len(entry) > 0 {
			en, et, l := protowire.ConsumeTag(entry)
			if l < 0 {
				break
			}
			entry = entry[l:]
			if et != protowire.BytesType {
				l = protowire.ConsumeFieldValue(en, et, entry)
				if l < 0 {
					break
				}
				entry = entry[l:]
				continue
			}
			s, l := protowire.ConsumeString(entry)
			if l < 0 {
				break
			}
			entry = entry[l:]
			switch en {
			case 1:
				k = s
			case 2:
				v = s
			}
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m
}

// appendNackMap encodes m as nack_map entries, keys sorted so the bytes
// are the same for the same map.
func appendNackMap(b []byte, m map[string]string) []byte {
	for _, k := range sortedKeys(m) {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, k)
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, m[k])
		b = protowire.AppendTag(b, nackMapField, protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	return b
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
