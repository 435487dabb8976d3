// Package statuspage_test drives a real headless Chromium against a running
// runner binary: the status page at / on the admin port shows what /status
// says, a Numaflow container's panic shows up in its errors list, and the
// page logs no console errors and loads nothing from elsewhere.
//
// It needs Debian's chromium package (.ci/run installs it); where no
// Chromium can be found the test is skipped with a message saying so.
package statuspage_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/internal/testutil"
	"github.com/monovertex/monovertex/runner"
)

// panicAt is the message the example transformer's first process panics on.
const panicAt = 2000

// pageView is what the test reads from the page's DOM.
type pageView struct {
	Fields   map[string]string `json:"fields"`
	Chain    []string          `json:"chain"`
	Errors   []pageError       `json:"errors"`
	Critical map[string]string `json:"critical"`
	Adapters []string          `json:"adapters"`
	Polls    int               `json:"polls"`
}

type pageError struct {
	Container, Stage, Code, Count, Message, Details string
}

const readPage = `(() => {
  const fields = {};
  document.querySelectorAll("[data-field]").forEach((e) => { if (e.id !== "chain") fields[e.dataset.field] = e.textContent.trim(); });
  const errors = [...document.querySelectorAll("#errors tr.container-error")].map((tr) => {
    const td = tr.querySelectorAll("td");
    const pre = tr.querySelector("pre");
    return { Container: td[1].textContent, Stage: td[2].textContent, Code: td[3].textContent, Count: td[4].textContent,
      Message: td[5].firstChild.textContent, Details: pre ? pre.textContent : "" };
  });
  const critical = {};
  document.querySelectorAll("#critical [data-reason]").forEach((e) => { critical[e.dataset.reason] = e.textContent; });
  return { fields, errors, critical,
    chain: [...document.querySelectorAll("#chain li")].map((e) => e.textContent),
    adapters: [...document.querySelectorAll("#adapters li")].map((e) => e.textContent),
    polls: Number(document.body.dataset.polls || 0) };
})()`

func (b *browser) view(t *testing.T) pageView {
	t.Helper()
	var v pageView
	if err := b.Eval(readPage, &v); err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return v
}

// waitPolls waits until the page has fetched /status n more times.
func (b *browser) waitPolls(t *testing.T, n int) {
	t.Helper()
	start := b.view(t).Polls
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d more page refreshes", n), func() bool {
		return b.view(t).Polls >= start+n
	})
}

func num(n int64) string { return strconv.FormatInt(n, 10) }

// maybe is how the page shows a -1 (unknown) value.
func maybe(n int64) string {
	if n < 0 {
		return "unknown"
	}
	return num(n)
}

func TestStatusPageInChromium(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome): install Debian's chromium package (apt-get install -y chromium), as .ci/run does, to run the status page test")
	}
	uds, cfgDir := t.TempDir(), t.TempDir()
	transformerBin := testutil.Build(t, "./cmd/example-udtransformer")
	tenv := map[string]string{"MV_UDS_DIR": uds, "EXAMPLE_DROP_EVERY": "0", "EXAMPLE_FANOUT_EVERY": "0"}
	withPanic := map[string]string{"EXAMPLE_PANIC_AT": strconv.Itoa(panicAt)}
	for k, v := range tenv {
		withPanic[k] = v
	}
	tr := testutil.Start(t, "example-udtransformer", transformerBin, withPanic)

	p := testutil.StartRunner(t, map[string]string{
		"MV_NAME":                  "status-demo",
		"MV_SOURCE":                "generator",
		"MV_GENERATOR_RPU":         "100",
		"MV_GENERATOR_DURATION":    "500ms",
		"MV_GENERATOR_MSG_SIZE":    "64",
		"MV_READ_BATCH_SIZE":       "50",
		"MV_TRANSFORMER":           "udtransformer",
		"MV_SINK":                  "log",
		"MV_UDS_DIR":               uds,
		"MV_CONFIG_DIR":            cfgDir,
		"MV_CONFIG_POLL":           "200ms",
		"MV_UDF_RECONNECT_TIMEOUT": "60s",
	})
	p.WaitReady(60 * time.Second)
	start := time.Now()

	b := startBrowser(t, bin, 1280, 900)
	b.Navigate(p.AdminURL + "/")
	b.waitPolls(t, 1)

	// The transformer panics on message panicAt and its SDK server stops;
	// Kubernetes would restart the container, the test does.
	select {
	case <-tr.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("the transformer did not panic at message %d within 60s", panicAt)
	}
	if !strings.Contains(tr.Stderr.String(), "EXAMPLE_PANIC_AT") {
		t.Fatalf("the transformer exited, but not from the injected panic:\n%s", tr.Stderr.String())
	}
	testutil.Start(t, "example-udtransformer (restarted)", transformerBin, tenv)

	var injected runner.ContainerError
	testutil.WaitFor(t, 30*time.Second, "the panic in /status errors", func() bool {
		st, err := p.Status()
		if err != nil || len(st.Errors) != 1 {
			return false
		}
		for _, e := range st.Errors[0].ContainerErrors {
			if e.Container == "transformer" && strings.Contains(e.Message, "UDF_EXECUTION_ERROR") {
				injected = e
				return true
			}
		}
		return false
	})
	if injected.Code != "Internal error" || injected.Stage != "transformer" || injected.Count < 1 ||
		!strings.Contains(injected.Message, fmt.Sprintf("EXAMPLE_PANIC_AT=%d reached", panicAt)) ||
		!strings.Contains(injected.Details, "panic") || !strings.Contains(injected.Details, "main.(*transformer).Transform") {
		t.Fatalf("the injected panic in /status errors is %+v; want code \"Internal error\" (numaflow-core's wording), stage transformer, the panic's message and its stack in details", injected)
	}
	before, _ := p.Status()
	testutil.WaitFor(t, 60*time.Second, "messages flowing through the restarted transformer", func() bool {
		st, err := p.Status()
		return err == nil && st.State == "running" && st.Totals.Acked > before.Totals.Acked+300
	})

	// Moment 1: running, with the container error on the page and half a
	// minute of the rate chart.
	testutil.WaitFor(t, 60*time.Second, "30s of rate history", func() bool {
		var n int
		return b.Eval(`document.querySelectorAll("#chart path").length`, &n) == nil && n == 2 && time.Since(start) > 30*time.Second
	})
	testutil.WaitFor(t, 30*time.Second, "the container error on the page", func() bool {
		for _, e := range b.view(t).Errors {
			if e.Container == "transformer" && strings.Contains(e.Message, "UDF_EXECUTION_ERROR") {
				return true
			}
		}
		return false
	})
	running := b.Screenshot()
	checkPNG(t, running, "running")

	// Moment 2: paused (MV_CONFIG_DIR), so the counters stand still and the
	// page can be compared with /status number by number.
	p.PauseAndSettle(t, cfgDir)
	b.waitPolls(t, 2) // both fetched after the counters stopped
	st1, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	v := b.view(t)
	st2, err := p.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st1.Totals != st2.Totals || !reflect.DeepEqual(st1.CriticalErrors, st2.CriticalErrors) || containerErrorCount(st1) != containerErrorCount(st2) {
		t.Fatalf("/status still moving while paused: %+v then %+v", st1.Totals, st2.Totals)
	}
	comparePage(t, v, st1)
	// The second screenshot in dark mode, with the panic's stack open: an
	// opened <details> must survive the refreshes.
	b.Call("Emulation.setEmulatedMedia", map[string]any{"features": []map[string]string{{"name": "prefers-color-scheme", "value": "dark"}}}, nil)
	if err := b.Eval(`document.querySelector("#errors details").open = true`, nil); err != nil {
		t.Fatal(err)
	}
	b.waitPolls(t, 2)
	var open bool
	if err := b.Eval(`document.querySelector("#errors details").open`, &open); err != nil || !open {
		t.Errorf("the opened error details closed on refresh (open=%v, %v)", open, err)
	}
	var bg string
	if err := b.Eval(`getComputedStyle(document.body).backgroundColor`, &bg); err != nil || bg != "rgb(15, 20, 25)" {
		t.Errorf("dark mode background is %q (%v), want rgb(15, 20, 25)", bg, err)
	}
	paused := b.Screenshot()
	checkPNG(t, paused, "paused")
	saveScreenshots(t, running, paused)

	// The page logged nothing wrong, and fetched nothing but the runner's.
	checkConsole(t, b)
	for _, raw := range b.Events("Network.requestWillBeSent") {
		var ev struct {
			Request struct{ URL string } `json:"request"`
		}
		json.Unmarshal(raw, &ev)
		if u := ev.Request.URL; !strings.HasPrefix(u, p.AdminURL+"/") && !strings.HasPrefix(u, "data:") && u != "about:blank" {
			t.Errorf("the page loaded %s, which is not the runner's: it must work air-gapped", u)
		}
	}

	// Keyboard: the refresh control takes focus and toggles with Enter.
	var pressed string
	if err := b.Eval(`(() => { document.getElementById("refresh").focus(); return document.activeElement.id; })()`, &pressed); err != nil || pressed != "refresh" {
		t.Errorf("the refresh button does not take keyboard focus: %q %v", pressed, err)
	}
	b.Call("Input.dispatchKeyEvent", map[string]any{"type": "keyDown", "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"}, nil)
	b.Call("Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}, nil)
	testutil.WaitFor(t, 5*time.Second, "Enter on the focused refresh button pausing the refresh", func() bool {
		var ap string
		return b.Eval(`document.getElementById("refresh").getAttribute("aria-pressed")`, &ap) == nil && ap == "true"
	})

	// Nothing lost: resume, stop, and count the sink's lines.
	if err := os.WriteFile(filepath.Join(cfgDir, "paused"), []byte("false"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Stop(30 * time.Second)
	l := testutil.StopLine(t, p.Stderr.String())
	lines := testutil.LogSinkIDs(t, p.Stdout.String())
	if l.Read == 0 || l.Acked != l.Read || l.Written != l.Acked || int64(lines) != l.Written {
		t.Fatalf("read %d acked %d written %d, sink lines %d: want read = acked = written = lines", l.Read, l.Acked, l.Written, lines)
	}
	t.Logf("page matched /status at read=acked=%d; container error %q x%d; nothing lost: %d written", st1.Totals.Read, injected.Message, injected.Count, lines)
}

func containerErrorCount(st runner.Status) int64 {
	var n int64
	for _, r := range st.Errors {
		for _, e := range r.ContainerErrors {
			n += e.Count
		}
	}
	return n
}

// comparePage checks every number and word the page shows against st.
func comparePage(t *testing.T, v pageView, st runner.Status) {
	t.Helper()
	want := map[string]string{
		"name": st.Name, "replica": strconv.Itoa(st.Replica), "state": st.State, "mode": st.Mode,
		"build.version": st.Build.Version, "build.commit": st.Build.Commit, "build.go_version": st.Build.GoVersion,
		"pending":                  maybe(st.Pending),
		"scaling.desired_replicas": maybe(int64(st.Scaling.DesiredReplicas)),
		"errors.count":             num(containerErrorCount(st)),
	}
	var totals map[string]int64
	raw, _ := json.Marshal(st.Totals)
	json.Unmarshal(raw, &totals)
	for k, n := range totals {
		want["totals."+k] = num(n)
	}
	if want["state"] != "paused" {
		t.Fatalf("/status state %q, want paused", st.State)
	}
	checked := 0
	for field, w := range want {
		got, ok := v.Fields[field]
		if !ok {
			// Totals the page does not show (read_bytes, ...) are fine; the
			// ones it must show are checked below.
			continue
		}
		if strings.ReplaceAll(got, ",", "") != w {
			t.Errorf("page %s = %q, /status says %q", field, got, w)
		}
		checked++
	}
	for _, must := range []string{"totals.read", "totals.acked", "totals.nacked", "totals.written", "totals.fallback_written",
		"totals.on_success_written", "totals.dropped", "totals.errors", "pending", "scaling.desired_replicas", "scaling.backlog_seconds",
		"processing_rate.1m", "state", "build.version", "errors.count"} {
		if _, ok := v.Fields[must]; !ok {
			t.Errorf("the page shows no %s", must)
		}
	}
	if !reflect.DeepEqual(v.Chain, st.Chain) {
		t.Errorf("page chain %q, /status chain %q", v.Chain, st.Chain)
	}
	if len(st.Errors) != 1 || len(v.Errors) != len(st.Errors[0].ContainerErrors) {
		t.Fatalf("page lists %d container errors, /status %v", len(v.Errors), st.Errors)
	}
	for i, e := range st.Errors[0].ContainerErrors {
		pe := v.Errors[i]
		if pe.Container != e.Container || pe.Stage != e.Stage || pe.Code != e.Code || pe.Count != num(e.Count) || pe.Message != e.Message || pe.Details != e.Details {
			t.Errorf("page error %d = %+v, /status %+v", i, pe, e)
		}
	}
	if len(v.Critical) != len(st.CriticalErrors) {
		t.Errorf("page critical errors %v, /status %v", v.Critical, st.CriticalErrors)
	}
	for reason, n := range st.CriticalErrors {
		if strings.ReplaceAll(v.Critical[reason], ",", "") != num(n) {
			t.Errorf("page critical %s = %q, /status %d", reason, v.Critical[reason], n)
		}
	}
	if st.CriticalErrors[runner.ReasonTransformerRuntime] < 1 {
		t.Errorf("monovtx_critical_error_total{reason=%q} not counted: %v", runner.ReasonTransformerRuntime, st.CriticalErrors)
	}
	if len(v.Adapters) != len(st.Chain) {
		t.Errorf("page readiness lists %d adapters, the chain has %d: %q", len(v.Adapters), len(st.Chain), v.Adapters)
	}
	for _, a := range v.Adapters {
		if !strings.Contains(a, "ready") && !strings.Contains(a, "no check") {
			t.Errorf("adapter readiness line %q says nothing about readiness", a)
		}
	}
	t.Logf("page equals /status on %d fields, %d container errors, %d critical reasons", checked, len(v.Errors), len(v.Critical))
}

// checkConsole fails on any console error or warning, uncaught exception,
// or error the browser logged (a failed load, a CSP violation).
func checkConsole(t *testing.T, b *browser) {
	t.Helper()
	for _, raw := range b.Events("Runtime.consoleAPICalled") {
		var ev struct {
			Type string            `json:"type"`
			Args []json.RawMessage `json:"args"`
		}
		json.Unmarshal(raw, &ev)
		if ev.Type == "error" || ev.Type == "warning" || ev.Type == "assert" {
			t.Errorf("the page logged console.%s: %s", ev.Type, raw)
		}
	}
	for _, raw := range b.Events("Runtime.exceptionThrown") {
		t.Errorf("the page threw: %s", raw)
	}
	for _, raw := range b.Events("Log.entryAdded") {
		var ev struct {
			Entry struct{ Level, Text, URL string } `json:"entry"`
		}
		json.Unmarshal(raw, &ev)
		if ev.Entry.Level == "error" || ev.Entry.Level == "warning" {
			t.Errorf("the browser logged %s: %s (%s)", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
		}
	}
}

func checkPNG(t *testing.T, b []byte, moment string) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s screenshot is not a PNG: %v", moment, err)
	}
	if r := img.Bounds(); r.Dx() < 1000 || r.Dy() < 800 {
		t.Fatalf("%s screenshot is %v, want the whole page", moment, r)
	}
}

// saveScreenshots writes both screenshots to the test's temp directory, or
// to STATUSPAGE_SCREENSHOT_DIR when set (docs/ keeps the running one for
// the README).
func saveScreenshots(t *testing.T, running, paused []byte) {
	dir := os.Getenv("STATUSPAGE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	for name, b := range map[string][]byte{"status-page.png": running, "status-page-paused.png": paused} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
}
