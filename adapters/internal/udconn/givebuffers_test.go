package udconn

import (
	"testing"

	"github.com/monovertex/monovertex/internal/payloadpool"
	"github.com/monovertex/monovertex/runner"
)

func TestGiveBuffersPutsOneReleaseOnTheFirstOutput(t *testing.T) {
	get := func() *payloadpool.Buffer { return payloadpool.Get(payloadpool.MinSize * 2) }
	released := func(b *payloadpool.Buffer) bool { return len(b.B) == 0 }

	// Outputs: one Release, on the first output, releasing every buffer.
	a, b := get(), get()
	res := runner.TransformResult{Outputs: []*runner.Message{{}, {}}}
	GiveBuffers(&res, a, nil, b)
	if res.Outputs[0].Release == nil || res.Outputs[1].Release != nil {
		t.Fatal("the Release is not on the first output alone")
	}
	if released(a) || released(b) {
		t.Fatal("a buffer went back before the engine released the outputs")
	}
	res.Outputs[0].Release()
	if !released(a) || !released(b) {
		t.Fatal("the first output's Release did not give back every buffer")
	}

	// No outputs (dropped, failed, nacked): the buffers go back at once.
	c := get()
	res = runner.TransformResult{}
	GiveBuffers(&res, c)
	if !released(c) {
		t.Fatal("a result without outputs kept its buffer")
	}

	// No buffers (small values): nothing to release.
	res = runner.TransformResult{Outputs: []*runner.Message{{}}}
	GiveBuffers(&res, nil)
	if res.Outputs[0].Release != nil {
		t.Fatal("a Release without buffers")
	}
}
