package faults_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
)

// TestHTTPStrictCloudEventsAre400AndNotDelivered: a binary CloudEvent
// without ce-specversion (it was taken as a plain body with a random id),
// and events whose ids differ only by surrounding white space (a batch
// with " sp" and "sp" delivered sp twice), are answered 400 and nothing of
// theirs is written; the well-formed events around them are written once.
func TestHTTPStrictCloudEventsAre400AndNotDelivered(t *testing.T) {
	p := startRunner(t, httpSourceEnv(nil))
	auth := "Bearer " + token
	ce := func(kv ...string) map[string]string {
		h := map[string]string{"Authorization": auth}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	event := func(id string) string {
		return fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/faults","type":"t","data":"v"}`, id)
	}
	refused := []struct {
		name   string
		header map[string]string
		body   string
	}{
		{"binary without ce-specversion", ce("Ce-Id", "nospec-1", "Ce-Source", "/faults", "Ce-Type", "t"), "nospec body"},
		{"binary with only ce-id", ce("Ce-Id", "nospec-2"), "nospec body"},
		{"batch with \" sp\" and \"sp\"", ce("Content-Type", "application/cloudevents-batch+json"), "[" + event(" sp") + "," + event("sp") + "]"},
		{"batch with \"sp\" and \"sp \"", ce("Content-Type", "application/cloudevents-batch+json"), "[" + event("sp") + "," + event("sp ") + "]"},
		{"structured \" lead\"", ce("Content-Type", "application/cloudevents+json"), event(" lead")},
		{"structured \"trail\\t\"", ce("Content-Type", "application/cloudevents+json"), event("trail\t")},
	}
	for _, r := range refused {
		if code, body := testutil.Post(t, p.PortURL+"/", []byte(r.body), r.header); code != http.StatusBadRequest {
			t.Fatalf("%s: %d %s, want 400", r.name, code, body)
		}
	}
	accepted := []struct {
		header map[string]string
		body   string
	}{
		{ce("Ce-Specversion", "1.0", "Ce-Id", "ok-1", "Ce-Source", "/faults", "Ce-Type", "t"), "binary"},
		{ce("Content-Type", "application/cloudevents-batch+json"), "[" + event("sp") + "," + event("sp2") + "]"},
		{ce("Content-Type", "application/cloudevents+json"), event("lead")},
		{ce("X-Numaflow-Id", "plain-1", "Ce-Other", "x"), "plain"},
	}
	for i, a := range accepted {
		if code, body := testutil.Post(t, p.PortURL+"/", []byte(a.body), a.header); code != http.StatusOK {
			t.Fatalf("well-formed request %d: %d %s", i, code, body)
		}
	}
	if code, took := sigterm(t, p, 30*time.Second); code != 0 {
		t.Fatalf("runner exited %d after SIGTERM (%v)", code, took)
	}
	ids := sinkIDs(t, p.Stdout.String())
	want := []string{"ok-1", "sp", "sp2", "lead", "plain-1"}
	var wrong []string
	for _, id := range want {
		if ids[id] != 1 {
			wrong = append(wrong, fmt.Sprintf("%q written %d times", id, ids[id]))
		}
	}
	if len(ids) != len(want) {
		wrong = append(wrong, fmt.Sprintf("%d ids written, want %d: %v", len(ids), len(want), ids))
	}
	if strings.Contains(p.Stdout.String(), "nospec body") {
		wrong = append(wrong, "a body without ce-specversion was written")
	}
	if len(wrong) > 0 {
		t.Fatalf("sink: %s", strings.Join(wrong, "; "))
	}
	t.Logf("%d malformed requests answered 400, nothing of theirs written; the %d well-formed events written once each", len(refused), len(want))
	noRaces(t, p)
	report(t, result{
		Scenario: "HTTP source: binary CloudEvent without ce-specversion, ids differing only by surrounding white space (6 requests)",
		Messages: len(want), Lost: 0, Duplicated: "0", Recovery: "-",
		Notes: fmt.Sprintf("all %d answered 400, none written; %d well-formed events written once each", len(refused), len(want)),
	})
}

// TestHTTPUnusableSettingsExitTwoWithOneLine: a body limit above 1 GiB
// (8 GiB was accepted and one request killed the runner out of memory), an
// in-flight budget of zero or below the body limit, and a token with
// control bytes each exit 2 with one stderr line naming the variable and
// never showing the token.
func TestHTTPUnusableSettingsExitTwoWithOneLine(t *testing.T) {
	cases := []struct{ name, value string }{
		{"MV_HTTP_MAX_BODY", "8589934592"},
		{"MV_HTTP_MAX_BODY", "1073741825"},
		{"MV_HTTP_MAX_INFLIGHT_BYTES", "0"},
		{"MV_HTTP_MAX_INFLIGHT_BYTES", "1024"},
		{"MV_HTTP_MAX_INFLIGHT_BYTES", "68719476737"},
		{"MV_HTTP_MAX_CONNECTIONS", "0"},
		{"MV_HTTP_MAX_CONNECTIONS", "many"},
		{"MV_HTTP_MAX_CONNECTIONS", "1048577"},
		{"MV_HTTP_MAX_HEADER_BYTES", "1024"},
		{"MV_HTTP_MAX_HEADER_BYTES", "16777217"},
		{"MV_HTTP_AUTH_TOKEN", "tok\x01en-secret"},
		{"MV_HTTP_AUTH_TOKEN", "tok\x1b[31men-secret"},
		{"MV_HTTP_AUTH_TOKEN", "tok\x7fen-secret"},
		{"MV_HTTP_AUTH_TOKEN", "tok\ten-secret"},
	}
	for _, c := range cases {
		p := testutil.StartRunner(t, httpSourceEnv(map[string]string{c.name: c.value}))
		code := p.Wait(30 * time.Second)
		stderr := strings.TrimRight(p.Stderr.String(), "\n")
		lines := strings.Split(stderr, "\n")
		t.Logf("%s=%q: exit %d, %d line(s): %s", c.name, c.value, code, len(lines), stderr)
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], c.name) {
			t.Fatalf("%s=%q: exit %d with %d stderr line(s) %q; want exit 2 and one line naming %s", c.name, c.value, code, len(lines), stderr, c.name)
		}
		if strings.Contains(stderr+p.Stdout.String(), "en-secret") {
			t.Fatalf("%s: the output shows the token: %q", c.name, stderr)
		}
	}
	report(t, result{Scenario: "HTTP source settings: MV_HTTP_MAX_BODY above 1 GiB, MV_HTTP_MAX_INFLIGHT_BYTES 0 / below the body limit / above 64 GiB, MV_HTTP_MAX_CONNECTIONS 0 / not a number / above 1048576, MV_HTTP_MAX_HEADER_BYTES below 4 KiB / above 16 MiB, MV_HTTP_AUTH_TOKEN with control bytes (" + strconv.Itoa(len(cases)) + " values)",
		Messages: 0, Lost: 0, Duplicated: "-", Recovery: "-", Notes: "exit 2, one stderr line naming the variable; the token never shown"})
}
