// Command example-udmap is a Numaflow map UDF (spec.udf) written with the
// numaflow-go SDK, used by the tests and the deploy/ example. It serves
// one of the three map modes, chosen by EXAMPLE_MAP_MODE: unary (default,
// on map.sock), batch (batchmap.sock) or stream (mapstream.sock), with the
// shared server-info file mapper-server-info in MV_UDS_DIR.
//
// For a value starting with a number n (as example-udsource makes them):
//
//   - n % EXAMPLE_DROP_EVERY == 1 is dropped (default 10);
//   - n % EXAMPLE_FANOUT_EVERY == 2 becomes three outputs with the values
//     "<value>#0", "<value>#1", "<value>#2" (default 10), which still start
//     with n, so a sink downstream can parse it;
//   - anything else passes with its value unchanged.
//
// Every output keeps the input's keys and carries the tags that
// EXAMPLE_TAG_RULES gives n: a comma-separated list of MOD:REM=TAG, each
// adding TAG when n % MOD == REM. The default,
// "5:0=fallback,5:1=onsuccess,5:3=sink", tags n%5==0 "fallback", n%5==1
// "onsuccess" and n%5==3 "sink" (inputs dropped by the rule above get no
// output to tag); "none" tags nothing. In unary mode every output also
// carries user metadata group "example" with key "n" = n in decimal
// (numaflow-go v0.12's batch and stream maps cannot return metadata).
//
// Values without a number follow the conformance suite's reference
// behaviour: "drop" is dropped, "fanout" becomes three unchanged copies,
// anything else passes.
package main

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/numaproj/numaflow-go/pkg/batchmapper"
	"github.com/numaproj/numaflow-go/pkg/mapper"
	"github.com/numaproj/numaflow-go/pkg/mapstreamer"

	"github.com/monovertex/monovertex/internal/examplesrv"
)

// defaultTagRules is the EXAMPLE_TAG_RULES default.
const defaultTagRules = "5:0=fallback,5:1=onsuccess,5:3=sink"

func main() {
	dir := examplesrv.Setup("example-udmap")
	rules, err := parseTagRules(examplesrv.Env("EXAMPLE_TAG_RULES", defaultTagRules))
	if err != nil {
		log.Fatalf("invalid EXAMPLE_TAG_RULES: %v", err)
	}
	m := &mapping{
		dropEvery:   examplesrv.Int("EXAMPLE_DROP_EVERY", 10),
		fanoutEvery: examplesrv.Int("EXAMPLE_FANOUT_EVERY", 10),
		tags:        rules,
	}
	mode := examplesrv.Env("EXAMPLE_MAP_MODE", "unary")
	if err := serve(context.Background(), dir, mode, m); err != nil {
		log.Fatal(err)
	}
}

// serve runs the map server of mode in dir until ctx ends.
func serve(ctx context.Context, dir, mode string, m *mapping) error {
	infoFile := filepath.Join(dir, "mapper-server-info")
	var start func(context.Context) error
	var sock string
	switch mode {
	case "unary":
		sock = filepath.Join(dir, "map.sock")
		start = mapper.NewServer(mapper.MapperFunc(m.unary),
			mapper.WithSockAddr(sock), mapper.WithServerInfoFilePath(infoFile)).Start
	case "batch":
		sock = filepath.Join(dir, "batchmap.sock")
		start = batchmapper.NewServer(batchmapper.BatchMapperFunc(m.batch),
			batchmapper.WithSockAddr(sock), batchmapper.WithServerInfoFilePath(infoFile)).Start
	case "stream":
		sock = filepath.Join(dir, "mapstream.sock")
		start = mapstreamer.NewServer(mapstreamer.MapStreamerFunc(m.stream),
			mapstreamer.WithSockAddr(sock), mapstreamer.WithServerInfoFilePath(infoFile)).Start
	default:
		return fmt.Errorf("invalid EXAMPLE_MAP_MODE=%q: want unary, batch or stream", mode)
	}
	log.Printf("serving %s map on %s", mode, sock)
	return start(ctx)
}

// tagRule adds tag to the outputs of n when n % mod == rem.
type tagRule struct {
	mod, rem int
	tag      string
}

func parseTagRules(s string) ([]tagRule, error) {
	if s == "none" {
		return nil, nil
	}
	var rules []tagRule
	for _, part := range strings.Split(s, ",") {
		cond, tag, ok := strings.Cut(strings.TrimSpace(part), "=")
		ms, rs, ok2 := strings.Cut(cond, ":")
		mod, err1 := strconv.Atoi(ms)
		rem, err2 := strconv.Atoi(rs)
		if !ok || !ok2 || err1 != nil || err2 != nil || mod <= 0 || rem < 0 || tag == "" {
			return nil, fmt.Errorf("%q: want MOD:REM=TAG with MOD > 0, such as 5:0=fallback, or none", part)
		}
		rules = append(rules, tagRule{mod: mod, rem: rem, tag: tag})
	}
	return rules, nil
}

type mapping struct {
	dropEvery, fanoutEvery int
	tags                   []tagRule
}

// output is one result of the rules, in a form each mode's SDK message is
// made from.
type output struct {
	value []byte
	tags  []string
	n     int
	has   bool // the value starts with a number
}

// apply returns the outputs for value v; none means dropped.
func (m *mapping) apply(v []byte) []output {
	n, ok := examplesrv.Number(v)
	if !ok {
		switch string(v) {
		case "drop":
			return nil
		case "fanout":
			return []output{{value: v}, {value: v}, {value: v}}
		}
		return []output{{value: v}}
	}
	var tags []string
	for _, r := range m.tags {
		if n%r.mod == r.rem {
			tags = append(tags, r.tag)
		}
	}
	switch {
	case m.dropEvery > 0 && n%m.dropEvery == 1:
		return nil
	case m.fanoutEvery > 0 && n%m.fanoutEvery == 2:
		outs := make([]output, 3)
		for k := range outs {
			outs[k] = output{value: fmt.Appendf(append([]byte(nil), v...), "#%d", k), tags: tags, n: n, has: true}
		}
		return outs
	}
	return []output{{value: v, tags: tags, n: n, has: true}}
}

func (m *mapping) unary(_ context.Context, keys []string, d mapper.Datum) mapper.Messages {
	out := mapper.MessagesBuilder()
	outs := m.apply(d.Value())
	if len(outs) == 0 {
		return out.Append(mapper.MessageToDrop())
	}
	for _, o := range outs {
		msg := mapper.NewMessage(o.value).WithKeys(keys).WithTags(o.tags)
		if o.has {
			md := mapper.NewUserMetadata()
			md.AddKV("example", "n", []byte(strconv.Itoa(o.n)))
			msg = msg.WithUserMetadata(md)
		}
		out = out.Append(msg)
	}
	return out
}

func (m *mapping) batch(_ context.Context, datums <-chan batchmapper.Datum) batchmapper.BatchResponses {
	resps := batchmapper.BatchResponsesBuilder()
	for d := range datums {
		r := batchmapper.NewBatchResponse(d.Id())
		outs := m.apply(d.Value())
		if len(outs) == 0 {
			r = r.Append(batchmapper.MessageToDrop())
		}
		for _, o := range outs {
			r = r.Append(batchmapper.NewMessage(o.value).WithKeys(d.Keys()).WithTags(o.tags))
		}
		resps = resps.Append(r)
	}
	return resps
}

func (m *mapping) stream(ctx context.Context, keys []string, d mapstreamer.Datum, ch chan<- mapstreamer.Message) {
	defer close(ch)
	outs := m.apply(d.Value())
	if len(outs) == 0 {
		select {
		case ch <- mapstreamer.MessageToDrop():
		case <-ctx.Done():
		}
		return
	}
	for _, o := range outs {
		select {
		case ch <- mapstreamer.NewMessage(o.value).WithKeys(keys).WithTags(o.tags):
		case <-ctx.Done():
			return
		}
	}
}
