package udconn

import (
	"reflect"
	"testing"
	"time"

	"github.com/numaproj/numaflow-go/pkg/apis/proto/common"
	"google.golang.org/protobuf/proto"

	"github.com/monovertex/monovertex/runner"
)

// TestNackOptionsSurviveTheWire: what a container's NackOptions carry,
// nack_map included (Numaflow's field 4, unknown to numaflow-go v0.12.0's
// type), comes out of the wire as the engine's Nack and goes back in as
// the same bytes.
func TestNackOptionsSurviveTheWire(t *testing.T) {
	for _, n := range []runner.Nack{
		{},
		{Delay: 250 * time.Millisecond},
		{Delay: 2 * time.Second, Reason: "busy", MaxDeliveries: 3, Map: map[string]string{"a": "1", "b": "", "": "empty key"}},
	} {
		b, err := proto.Marshal(NackToProto(n))
		if err != nil {
			t.Fatal(err)
		}
		var back common.NackOptions
		if err := proto.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := NackFromProto(&back); !reflect.DeepEqual(got, n) {
			t.Errorf("%+v came back as %+v", n, got)
		}
		again, _ := proto.Marshal(NackToProto(NackFromProto(&back)))
		if string(again) != string(b) {
			t.Errorf("%+v: %x encoded again as %x", n, b, again)
		}
	}
	if got := NackFromProto(nil); !reflect.DeepEqual(got, runner.Nack{}) {
		t.Errorf("no options became %+v", got)
	}
}
