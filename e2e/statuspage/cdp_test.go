package statuspage_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// findChromium returns the path of a Chromium or Chrome binary, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is a headless Chromium driven over the Chrome DevTools Protocol:
// one websocket to the browser, one page target attached in flat mode.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	ws      *websocket.Conn
	session string

	mu      sync.Mutex
	nextID  int64
	waiting map[int64]chan cdpReply
	events  []cdpEvent
	readErr error
	done    chan struct{}
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type cdpEvent struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

type cdpMessage struct {
	ID        int64           `json:"id"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	SessionID string          `json:"sessionId"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startBrowser starts Chromium headless on a loopback debugging port the
// browser picks, connects to it and opens one page of width x height.
func startBrowser(t *testing.T, bin string, width, height int) *browser {
	t.Helper()
	profile := t.TempDir()
	cmd := exec.Command(bin,
		"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--remote-allow-origins=http://127.0.0.1",
		"--user-data-dir="+profile, "about:blank")
	stderr := &strings.Builder{}
	var stderrMu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		stderrMu.Lock()
		defer stderrMu.Unlock()
		if stderr.Len() < 64<<10 {
			stderr.Write(p)
		}
		return len(p), nil
	})
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	b := &browser{t: t, cmd: cmd, waiting: map[int64]chan cdpReply{}, done: make(chan struct{})}
	t.Cleanup(b.close)

	// Chromium writes the port it chose and the browser target's path to
	// DevToolsActivePort in the profile once it listens.
	var port, path string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if f, err := os.Open(filepath.Join(profile, "DevToolsActivePort")); err == nil {
			sc := bufio.NewScanner(f)
			var lines []string
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			f.Close()
			if len(lines) >= 2 {
				port, path = lines[0], lines[1]
				break
			}
		}
		if time.Now().After(deadline) {
			stderrMu.Lock()
			defer stderrMu.Unlock()
			t.Fatalf("chromium did not open its debugging port within 30s; stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cfg, err := websocket.NewConfig("ws://127.0.0.1:"+port+path, "http://127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("connect to chromium's DevTools websocket: %v", err)
	}
	ws.MaxPayloadBytes = 64 << 20 // screenshots
	b.ws = ws
	go b.readLoop()

	var created struct {
		TargetID string `json:"targetId"`
	}
	b.browserCall("Target.createTarget", map[string]any{"url": "about:blank"}, &created)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.browserCall("Target.attachToTarget", map[string]any{"targetId": created.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	for _, domain := range []string{"Runtime.enable", "Log.enable", "Page.enable", "Network.enable"} {
		b.Call(domain, nil, nil)
	}
	b.Call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (b *browser) readLoop() {
	defer close(b.done)
	for {
		var raw []byte
		if err := websocket.Message.Receive(b.ws, &raw); err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.waiting[m.ID]; ok {
				ch <- cdpReply{Result: m.Result, Error: m.Error}
				delete(b.waiting, m.ID)
			}
		} else if m.Method != "" {
			b.events = append(b.events, cdpEvent{Method: m.Method, Params: m.Params})
		}
		b.mu.Unlock()
	}
}

func (b *browser) send(session, method string, params any, out any) error {
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return b.readErr
	}
	b.nextID++
	id := b.nextID
	ch := make(chan cdpReply, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	body, _ := json.Marshal(msg)
	if err := websocket.Message.Send(b.ws, string(body)); err != nil {
		return err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: connection to chromium lost: %v", method, b.readErr)
		}
		if r.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, r.Error.Message, r.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: no answer from chromium within 30s", method)
	}
}

func (b *browser) browserCall(method string, params, out any) {
	b.t.Helper()
	if err := b.send("", method, params, out); err != nil {
		b.t.Fatal(err)
	}
}

// Call sends a command to the page; errors fail the test.
func (b *browser) Call(method string, params, out any) {
	b.t.Helper()
	if err := b.send(b.session, method, params, out); err != nil {
		b.t.Fatal(err)
	}
}

// Eval evaluates a JavaScript expression in the page and decodes its
// JSON-serialisable value into out.
func (b *browser) Eval(expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := b.send(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("evaluate %q: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// Navigate loads url and waits for the load event.
func (b *browser) Navigate(url string) {
	b.t.Helper()
	b.Call("Page.navigate", map[string]any{"url": url}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		var state string
		if b.Eval("document.readyState", &state) == nil && state == "complete" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.t.Fatalf("%s did not load within 30s", url)
}

// Screenshot captures the whole page as PNG.
func (b *browser) Screenshot() []byte {
	b.t.Helper()
	var r struct {
		Data string `json:"data"`
	}
	b.Call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// Events returns the events received so far with the given method.
func (b *browser) Events(method string) []json.RawMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []json.RawMessage
	for _, e := range b.events {
		if e.Method == method {
			out = append(out, e.Params)
		}
	}
	return out
}

func (b *browser) close() {
	if b.ws != nil {
		b.ws.Close()
		<-b.done
	}
	if b.cmd.Process != nil {
		b.cmd.Process.Kill()
		err := b.cmd.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			b.t.Logf("chromium: %v", err)
		}
	}
}
