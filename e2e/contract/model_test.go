package contract_test

import (
	"strconv"
	"strings"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// The example programs' rules, as the tests configure them (see the
// package comments of cmd/example-udtransformer, cmd/example-udmap and
// cmd/example-udsink). For a source id n:
const (
	// example-udtransformer
	tDropEvery   = 10 // n%10 == 0 dropped
	tFanoutEvery = 10 // n%10 == 1 becomes three outputs keyed fan0..fan2
	tFanout      = 3
	tNackEvery   = 50 // n%50 == 2 nacked (no delay) once per transformer process

	// example-udmap
	mDropEvery   = 9  // n%9 == 1 dropped
	mFanoutEvery = 11 // n%11 == 2 becomes three outputs "<value>#0".."#2"
	mFanout      = 3
	// mTagRules tags by n%6 (and n%12 for "fb"); every n gets a tag.
	mTagRules = "6:0=fallback,12:0=fb,6:1=onsuccess,6:2=sink,6:3=sink,6:4=sink,6:5=other"

	// the runner's bypass conditions: "and" needs both tags, so n%12 == 6
	// (tagged fallback only) is not bypassed.
	bypassSink      = "or:sink"
	bypassFallback  = "and:fallback,fb"
	bypassOnSuccess = "or:onsuccess"

	// example-udsink as the primary sink; the fallback and onSuccess sinks
	// only fail once.
	sFallbackEvery  = 7  // n%7 == 0 answered FALLBACK
	sFailEvery      = 13 // n%13 == 5 FAILURE once per sink process
	sNackEvery      = 30 // n%30 == 4 NACK with sNackDelayMS once per sink process
	sNackDelayMS    = 250
	sOnSuccessEvery = 8 // n%8 == 3 written, then ON_SUCCESS with a replacement
)

// onSuccessPrefix starts the replacement values example-udsink gives the
// onSuccess sink.
const onSuccessPrefix = "onsuccess:"

var eventBase = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// The output files, one per sink container.
const (
	fileSink      = "sink.out"
	fileFallback  = "fallback.out"
	fileOnSuccess = "onsuccess.out"
)

var outFiles = []string{fileSink, fileFallback, fileOnSuccess}

// want is one line an output file must hold.
type want struct {
	n       int
	size    int
	keys    string
	eventMS int64
	ok      bool // the value is the source's own (no map fan-out suffix)
}

// model is where every output of ids 0..total-1 must end, and the counts
// the runner must report, derived from the rules above.
type model struct {
	files map[string]map[string]want // file -> output id -> line
	// outputsOf lists, per n, the (file, id) pairs its ack waits for.
	outputsOf [][][2]string

	transformerDropped, udfDropped, bypassDropped int64
	bypassed                                      int64 // per pass, nacked inputs counted twice
	sinkNacked                                    int64 // outputs answered NACK
	nackedInputs, sinkNackedInputs                int64
}

// tagsOf is what example-udmap's mTagRules give n.
func tagsOf(n int) []string {
	var tags []string
	for _, part := range strings.Split(mTagRules, ",") {
		cond, tag, _ := strings.Cut(part, "=")
		ms, rs, _ := strings.Cut(cond, ":")
		mod, _ := strconv.Atoi(ms)
		rem, _ := strconv.Atoi(rs)
		if n%mod == rem {
			tags = append(tags, tag)
		}
	}
	return tags
}

func has(tags []string, t string) bool {
	for _, x := range tags {
		if x == t {
			return true
		}
	}
	return false
}

// route is where the map's outputs of n go by the bypass conditions:
// "sink" (the primary, by condition or because none is set), "fallback",
// "onsuccess", or "drop" (the primary has conditions and none matched).
func route(n int, sinkCondition bool) string {
	tags := tagsOf(n)
	switch {
	case sinkCondition && has(tags, "sink"):
		return "sink"
	case has(tags, "fallback") && has(tags, "fb"):
		return "fallback"
	case has(tags, "onsuccess"):
		return "onsuccess"
	case sinkCondition:
		return "drop"
	}
	return "sink"
}

// newModel computes the model for total ids; sinkCondition says whether
// MV_BYPASS_SINK is set.
func newModel(total int, sinkCondition bool) *model {
	m := &model{files: map[string]map[string]want{}, outputsOf: make([][][2]string, total)}
	for _, f := range outFiles {
		m.files[f] = map[string]want{}
	}
	for n := 0; n < total; n++ {
		if n%tNackEvery == 2 {
			m.nackedInputs++ // once, by the transformer, before anything is written
		}
		if n%tDropEvery == 0 {
			m.transformerDropped++
			continue
		}
		// The transformer's outputs: id suffix and keys.
		type tout struct{ id, keys string }
		touts := []tout{{testutil.ExampleSourceID(n), "even"}}
		if n%2 == 1 {
			touts[0].keys = "odd"
		}
		if n%tFanoutEvery == 1 {
			touts = nil
			for k := 0; k < tFanout; k++ {
				touts = append(touts, tout{testutil.ExampleSourceID(n) + "-" + strconv.Itoa(k), "fan" + strconv.Itoa(k)})
			}
		}
		if n%mDropEvery == 1 {
			m.udfDropped += int64(len(touts))
			continue
		}
		mapFanout := n%mFanoutEvery == 2
		base := want{n: n, size: len(strconv.Itoa(n)), eventMS: eventBase.Add(time.Duration(n)*time.Millisecond + time.Hour).UnixMilli(), ok: !mapFanout}
		if mapFanout {
			base.size += 2 // "#k"
		}
		var outs []tout
		for _, t := range touts {
			if !mapFanout {
				outs = append(outs, t)
				continue
			}
			for j := 0; j < mFanout; j++ {
				outs = append(outs, tout{t.id + "-" + strconv.Itoa(j), t.keys})
			}
		}
		r := route(n, sinkCondition)
		if r != "drop" && r != "sink" || sinkCondition && r == "sink" {
			m.bypassed += int64(len(outs))
		}
		put := func(file string, id string, w want) {
			m.files[file][id] = w
			m.outputsOf[n] = append(m.outputsOf[n], [2]string{file, id})
		}
		for _, o := range outs {
			w := base
			w.keys = o.keys
			switch {
			case r == "drop":
				m.bypassDropped++
			case r == "fallback":
				put(fileFallback, o.id, w)
			case r == "onsuccess":
				put(fileOnSuccess, o.id, w)
			case n%sFallbackEvery == 0:
				put(fileFallback, o.id, w)
			default:
				put(fileSink, o.id, w)
				if n%sOnSuccessEvery == 3 {
					ons := w
					ons.size += len(onSuccessPrefix)
					ons.keys = "ons"
					put(fileOnSuccess, o.id, ons)
				}
			}
		}
		if r == "sink" && n%sFallbackEvery != 0 && n%sNackEvery == 4 {
			m.sinkNacked += int64(len(outs))
			m.sinkNackedInputs++
			m.nackedInputs++
			if sinkCondition {
				m.bypassed += int64(len(outs)) // bypassed again when read again
			}
		}
	}
	return m
}

// sizes returns the number of distinct outputs the model puts in each file.
func (m *model) sizes() map[string]int {
	s := map[string]int{}
	for f, ids := range m.files {
		s[f] = len(ids)
	}
	return s
}
