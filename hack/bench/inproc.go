package main

import (
	"context"
	"strconv"
	"time"
)

// ReshapeJSONata is the JSONata expression of the jsonata scenario: the
// generator's payload reshaped into its value, createdts and the length
// of its padding, as example-function does with RESHAPE=true.
const ReshapeJSONata = `{"specversion": "1.0", "id": id, "type": "reshaped", "source": source, "handledby": "example-function",
 "data": {"value": data.value, "createdts": data.createdts, "size": $length(data.padding)}}`

// PassFilter is the filter scenario's CESQL expression: it reads two
// attributes and lets every generated message through, so the sides
// write the same messages and differ only by the filter's cost.
const PassFilter = "type = 'dev.monovertex.message' AND source LIKE '/monovertex/%'"

// inprocFamilies are the in-process stages of issue 43, each against what
// a user would do without them.
func inprocFamilies() []*family {
	return []*family{
		{
			name: "generator->jsonata->blackhole", sizes: []int{KiB},
			needs: []string{"MV_SOURCE=generator", "MV_TRANSFORMER=jsonata", "MV_SINK=blackhole"},
			peer:  "the runner calling example-function (RESHAPE=true, the same reshaping in Go) on loopback, MV_TRANSFORMER=cloudevents",
			what:  "the JSONata transformer reshaping each 1 KiB JSON payload in process (MV_TRANSFORMER=jsonata)",
			sides: (*harness).sidesJSONata,
		},
		{
			name: "generator->filter->blackhole", sizes: []int{KiB},
			needs:    []string{"MV_SOURCE=generator", "MV_SINK=blackhole"},
			baseline: "the same runner without the filter",
			what:     "the CESQL filter (MV_FILTER, two attributes, every message passes) before the sink; its cost is the CPU per message above the baseline's",
			sides:    (*harness).sidesFilter,
		},
	}
}

func (h *harness) sidesJSONata(sc scenario, rec *record) ([]side, func(), error) {
	batch := batchFor(sc.size)
	conc := h.concurrency
	runnerRecord(rec, sc, batch, batchLatency)
	rec.Concurrency = conc
	fn, url, err := h.startFunction("example-function-"+sc.id(), map[string]string{"RESHAPE": "true"})
	if err != nil {
		return nil, nil, err
	}
	return []side{
		{"runner", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runRunnerSide(ctx, sc, batch, merge(generatorEnv(sc.size), map[string]string{
				"MV_TRANSFORMER":        "jsonata",
				"MV_JSONATA_EXPRESSION": ReshapeJSONata,
				"MV_SINK":               "blackhole",
			}))
		}},
		{"peer", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runRunnerSide(ctx, sc, batch, merge(generatorEnv(sc.size), map[string]string{
				"MV_TRANSFORMER":             "cloudevents",
				"MV_TRANSFORMER_URL":         url,
				"MV_TRANSFORMER_CONCURRENCY": strconv.Itoa(conc),
				"MV_SINK":                    "blackhole",
			}), fn)
		}},
	}, func() { fn.stop(5 * time.Second) }, nil
}

func (h *harness) sidesFilter(sc scenario, rec *record) ([]side, func(), error) {
	batch := batchFor(sc.size)
	runnerRecord(rec, sc, batch, batchLatency)
	env := merge(generatorEnv(sc.size), map[string]string{"MV_SINK": "blackhole"})
	return []side{
		{"runner", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runRunnerSide(ctx, sc, batch, merge(env, map[string]string{"MV_FILTER": PassFilter}))
		}},
		{"baseline", func(ctx context.Context, sc scenario) (sideResult, error) {
			return h.runRunnerSide(ctx, sc, batch, env)
		}},
	}, func() {}, nil
}

// startFunction starts the main module's example-function on a free
// loopback port ($PORT) with env and returns it with its URL.
func (h *harness) startFunction(name string, env map[string]string) (*proc, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := h.start(name, h.functionBin, nil, merge(env, map[string]string{"PORT": strconv.Itoa(port)}), false)
	if err != nil {
		return nil, "", err
	}
	if err := waitUntil(name+" to listen on "+addr, 30*time.Second, p, func() bool { return dialOK(addr) }); err != nil {
		p.stop(5 * time.Second)
		return nil, "", err
	}
	return p, "http://" + addr + "/", nil
}
