package cloudevents_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	httpsrc "github.com/monovertex/monovertex/adapters/source/http"
	"github.com/monovertex/monovertex/internal/testutil"
)

// startHTTPRunner starts the runner binary with the HTTP source under
// MV_NAME name, the CloudEvents sink and env, and waits until it is ready.
func startHTTPRunner(t *testing.T, name string, env map[string]string) *testutil.Process {
	t.Helper()
	full := map[string]string{
		"MV_NAME": name, "MV_SOURCE": "http", "MV_SINK": "cloudevents",
		"MV_READ_TIMEOUT": "50ms", "MV_SHUTDOWN_TIMEOUT": "5s",
	}
	for k, v := range env {
		full[k] = v
	}
	p := testutil.StartRunner(t, full)
	p.WaitReady(90 * time.Second)
	return p
}

// sendEvents posts the events ev-<from> to ev-<to-1>, with the payload
// "payload ev-<i>", to the HTTP source of the runner p named name; each
// is answered once its message is final.
func sendEvents(p *testutil.Process, name string, from, to int) []<-chan answer {
	var chans []<-chan answer
	for i := from; i < to; i++ {
		id := fmt.Sprintf("ev-%d", i)
		chans = append(chans, sendAsync(p.PortURL+"/vertices/"+name, "payload "+id, httpsrc.HeaderID, id, "Content-Type", "text/plain"))
	}
	return chans
}

// waitOK waits for every answer and fails the test at one that is not 200.
func waitOK(t *testing.T, chans []<-chan answer) {
	t.Helper()
	for _, ch := range chans {
		if a := wait(t, ch); a.Status != http.StatusOK {
			t.Fatalf("answer %+v, want 200", a)
		}
	}
}
