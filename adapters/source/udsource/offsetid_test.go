package udsource_test

import (
	"encoding/base64"
	"strconv"
	"testing"

	"github.com/monovertex/monovertex/adapters/source/udsource"
)

// OffsetID is Numaflow's form: the offset in standard base64, a dash, the
// partition as numaflow-core keeps it, a u16 (so -3 is 65533).
func TestOffsetIDIsNumaflowsForm(t *testing.T) {
	for _, o := range []udsource.Offset{
		{},
		{Value: []byte("1")},
		{Value: []byte{0, 0xff, 0x10, 0x80}, Partition: 7},
		{Value: []byte("a longer offset of a partitioned source"), Partition: -3},
		{Value: make([]byte, 1000), Partition: 2147483647},
		{Value: []byte("x"), Partition: 65536 + 9},
	} {
		want := base64.StdEncoding.EncodeToString(o.Value) + "-" + strconv.Itoa(int(uint16(o.Partition)))
		if got := udsource.OffsetID(&o); got != want {
			t.Errorf("OffsetID(%q, %d) = %q, want %q", o.Value, o.Partition, got, want)
		}
	}
}
