package udconn

import (
	mappb "github.com/numaproj/numaflow-go/pkg/apis/proto/map/v1"
	sinkpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sink/v1"
	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	transformpb "github.com/numaproj/numaflow-go/pkg/apis/proto/sourcetransform/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/monovertex/monovertex/adapters/internal/udcodec"
)

func descriptor(m proto.Message) protoreflect.MessageDescriptor { return m.ProtoReflect().Descriptor() }

// The payload fields of the Numaflow messages that carry user data both
// ways, for the codec of every connection to a container.
var (
	bufferPool = udcodec.NewPool()
	codec      = udcodec.New(bufferPool,
		udcodec.Payload{Message: descriptor(&sourcepb.ReadResponse{}), Outer: 1, Inner: 1},               // result.payload
		udcodec.Payload{Message: descriptor(&sinkpb.SinkRequest{}), Outer: 1, Inner: 2},                  // request.value
		udcodec.Payload{Message: descriptor(&transformpb.SourceTransformRequest{}), Outer: 1, Inner: 2},  // request.value
		udcodec.Payload{Message: descriptor(&transformpb.SourceTransformResponse{}), Outer: 1, Inner: 2}, // results[].value
		udcodec.Payload{Message: descriptor(&mappb.MapRequest{}), Outer: 1, Inner: 2},                    // request.value
		udcodec.Payload{Message: descriptor(&mappb.MapResponse{}), Outer: 1, Inner: 2},                   // results[].value
	)
)
