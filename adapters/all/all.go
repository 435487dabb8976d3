// Package all registers every adapter kind: importing it makes each one
// selectable with MV_SOURCE, MV_TRANSFORMER, MV_UDF and the MV_*SINK
// variables, for the runner and for mvctl, which checks what it emits
// against the same kinds and settings.
package all

import (
	_ "github.com/monovertex/monovertex/adapters/filter"
	_ "github.com/monovertex/monovertex/adapters/sink/blackhole"
	_ "github.com/monovertex/monovertex/adapters/sink/cloudevents"
	_ "github.com/monovertex/monovertex/adapters/sink/jetstream"
	_ "github.com/monovertex/monovertex/adapters/sink/kafka"
	_ "github.com/monovertex/monovertex/adapters/sink/log"
	_ "github.com/monovertex/monovertex/adapters/sink/sqs"
	_ "github.com/monovertex/monovertex/adapters/sink/udsink"
	_ "github.com/monovertex/monovertex/adapters/source/generator"
	_ "github.com/monovertex/monovertex/adapters/source/http"
	_ "github.com/monovertex/monovertex/adapters/source/jetstream"
	_ "github.com/monovertex/monovertex/adapters/source/kafka"
	_ "github.com/monovertex/monovertex/adapters/source/nats"
	_ "github.com/monovertex/monovertex/adapters/source/sqs"
	_ "github.com/monovertex/monovertex/adapters/source/udsource"
	_ "github.com/monovertex/monovertex/adapters/transformer/cloudevents"
	_ "github.com/monovertex/monovertex/adapters/transformer/jsonata"
	_ "github.com/monovertex/monovertex/adapters/transformer/udmap"
	_ "github.com/monovertex/monovertex/adapters/transformer/udtransformer"
)
