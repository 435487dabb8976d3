// Command goaws runs Admiral-Piett/goaws, an SQS-compatible server, for the
// SQS tests: it is its own module, so that goaws and its old aws-sdk-go
// stay out of the runner's module graph, and tests build it with
// "go build" from here (internal/sqstest) like any other peer.
//
// It wraps goaws's own router instead of running goaws's main, for three
// things the tests need and goaws v0.4.5 lacks: it listens on the loopback
// address it is given (goaws's main listens on every interface); it writes
// every SQS action it served, in the order it served them, to a JSON-lines
// log (-log), which is how a test observes on the server what a runner did
// (each visibility change, each delete, each message received and sent);
// and it refuses, per entry, the SendMessageBatch entries whose body
// matches -fail-regex (sent to -fail-queue, if set), as SQS answers an entry it cannot take in the
// batch's Failed list, so a test can drive a sink's per-entry failures.
//
// goaws v0.4.5 speaks SQS's query protocol only (form requests, XML
// answers); the runner's SQS adapters speak it with MV_SQS_PROTOCOL=query.
package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Admiral-Piett/goaws/app"
	"github.com/Admiral-Piett/goaws/app/conf"
	"github.com/Admiral-Piett/goaws/app/gosqs"
	"github.com/Admiral-Piett/goaws/app/router"
	"github.com/sirupsen/logrus"
)

// Event is one line of the action log.
type Event struct {
	Seq int64 `json:"seq"`
	// At is when the action was served, in Unix milliseconds.
	At     int64  `json:"at"`
	Action string `json:"action"`
	Queue  string `json:"queue,omitempty"`
	// Status is the HTTP status goaws answered with.
	Status int `json:"status"`
	// Receipt is the receipt handle of ChangeMessageVisibility and
	// DeleteMessage, VisibilityTimeout the new timeout in seconds.
	Receipt           string `json:"receipt,omitempty"`
	VisibilityTimeout string `json:"visibility_timeout,omitempty"`
	// Receipts are the receipt handles of a DeleteMessageBatch.
	Receipts []string `json:"receipts,omitempty"`
	// Messages are the messages a ReceiveMessage returned, or the entries
	// a SendMessageBatch or SendMessage stored.
	Messages []EventMessage `json:"messages,omitempty"`
	// Refused are the bodies of SendMessageBatch entries refused per entry.
	Refused []string `json:"refused,omitempty"`
}

// EventMessage is a message in an Event.
type EventMessage struct {
	ID      string `json:"id,omitempty"`
	Receipt string `json:"receipt,omitempty"`
	Body    string `json:"body"`
	// DelaySeconds is a sent entry's (goaws v0.4.5 ignores it in batches).
	DelaySeconds string `json:"delay_seconds,omitempty"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:4100", "loopback host:port to listen on")
	queues := flag.String("queues", "in,out", "comma-separated queues to create at start")
	visibility := flag.Int("visibility", 30, "visibility timeout of the queues, in seconds")
	account := flag.String("account", "100010001000", "account ID in the queue URLs")
	logPath := flag.String("log", "", "JSON-lines file of every action served (none: no log)")
	failRegex := flag.String("fail-regex", "", "SendMessageBatch entries whose body matches are refused per entry")
	failQueue := flag.String("fail-queue", "", "the queue -fail-regex applies to (none: every queue)")
	flag.Parse()

	host, port, err := net.SplitHostPort(*addr)
	if err != nil || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() {
		log.Fatalf("goaws: -addr %q must be a loopback IP and port", *addr)
	}
	var fail *regexp.Regexp
	if *failRegex != "" {
		if fail, err = regexp.Compile(*failRegex); err != nil {
			log.Fatalf("goaws: -fail-regex: %v", err)
		}
	}
	cfgDir, err := os.MkdirTemp("", "goaws-conf-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(cfgDir)
	var b strings.Builder
	fmt.Fprintf(&b, "Local:\n  Host: %s\n  Port: %s\n  AccountId: %q\n  QueueAttributeDefaults:\n    VisibilityTimeout: %d\n  Queues:\n", host, port, *account, *visibility)
	for _, q := range strings.Split(*queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			fmt.Fprintf(&b, "    - Name: %s\n", q)
		}
	}
	cfgFile := filepath.Join(cfgDir, "goaws.yaml")
	if err := os.WriteFile(cfgFile, []byte(b.String()), 0o600); err != nil {
		log.Fatal(err)
	}
	logrus.SetLevel(logrus.WarnLevel)
	conf.LoadYamlConfig(cfgFile, "Local")

	s := &server{next: router.New(), fail: fail, failQueue: *failQueue}
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		s.out = f
	}
	go gosqs.PeriodicTasks(time.Second, make(chan struct{}))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("goaws listening on http://%s\n", ln.Addr())
	log.Fatal(http.Serve(ln, s))
}

type server struct {
	next      http.Handler
	fail      *regexp.Regexp
	failQueue string

	mu  sync.Mutex // serialises requests, so the log is the order served
	out *os.File
	seq int64
}

// recorder keeps a copy of the answer for the log.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

func (s *server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if err := req.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	action := req.Form.Get("Action")
	if action == "ReceiveMessage" {
		// A long poll must not hold the others up: it takes the lock only
		// to log what it returned.
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		s.next.ServeHTTP(rec, req)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.logEvent(Event{Action: action, Queue: queueOf(req), Status: rec.status, Messages: received(rec.body.Bytes())})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := Event{Action: action, Queue: queueOf(req)}
	switch action {
	case "SendMessageBatch":
		ev.Refused = s.refuse(req)
	case "ChangeMessageVisibility", "DeleteMessage":
		ev.Receipt = req.Form.Get("ReceiptHandle")
		ev.VisibilityTimeout = req.Form.Get("VisibilityTimeout")
	case "DeleteMessageBatch":
		for _, k := range entryKeys(req.Form, "DeleteMessageBatchRequestEntry", "ReceiptHandle") {
			ev.Receipts = append(ev.Receipts, req.Form.Get(k))
		}
	case "SendMessage":
		ev.Messages = []EventMessage{{Body: req.Form.Get("MessageBody")}}
	}
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	if len(ev.Refused) > 0 {
		s.sendWithRefusals(rec, req)
	} else {
		s.next.ServeHTTP(rec, req)
	}
	ev.Status = rec.status
	if action == "SendMessageBatch" && rec.status == http.StatusOK {
		for _, k := range entryKeys(req.Form, "SendMessageBatchRequestEntry", "MessageBody") {
			delay := strings.TrimSuffix(k, "MessageBody") + "DelaySeconds"
			ev.Messages = append(ev.Messages, EventMessage{Body: req.Form.Get(k), DelaySeconds: req.Form.Get(delay)})
		}
	}
	s.logEvent(ev)
}

// refuse takes the entries to refuse out of a SendMessageBatch form,
// renumbering the rest as goaws expects (1..n, no gaps), and returns the
// refused entries' bodies; the ids of the refused entries are kept in
// the form under "Refused.<n>".
func (s *server) refuse(req *http.Request) []string {
	if s.fail == nil || (s.failQueue != "" && queueOf(req) != s.failQueue) {
		return nil
	}
	type entry map[string]string
	byIndex := map[int]entry{}
	for k, v := range req.Form {
		parts := strings.SplitN(k, ".", 3)
		if len(parts) != 3 || parts[0] != "SendMessageBatchRequestEntry" {
			continue
		}
		i, err := strconv.Atoi(parts[1])
		if err != nil {
			continue
		}
		if byIndex[i] == nil {
			byIndex[i] = entry{}
		}
		byIndex[i][parts[2]] = v[0]
		delete(req.Form, k)
	}
	idx := make([]int, 0, len(byIndex))
	for i := range byIndex {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var refused []string
	n := 0
	for _, i := range idx {
		e := byIndex[i]
		if s.fail.MatchString(e["MessageBody"]) {
			refused = append(refused, e["MessageBody"])
			req.Form.Add("Refused.Id", e["Id"])
			continue
		}
		n++
		for field, v := range e {
			req.Form.Set(fmt.Sprintf("SendMessageBatchRequestEntry.%d.%s", n, field), v)
		}
	}
	return refused
}

// sendWithRefusals answers a SendMessageBatch some of whose entries were
// refused: goaws stores the rest, and the refused ones are added to the
// answer's Failed list.
func (s *server) sendWithRefusals(w http.ResponseWriter, req *http.Request) {
	resp := app.SendMessageBatchResponse{Xmlns: "http://queue.amazonaws.com/doc/2012-11-05/"}
	if countEntries(req.Form) > 0 {
		rec := &recorder{ResponseWriter: discard{}, status: http.StatusOK}
		s.next.ServeHTTP(rec, req)
		if rec.status != http.StatusOK {
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
			return
		}
		if err := xml.Unmarshal(rec.body.Bytes(), &resp); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	for _, id := range req.Form["Refused.Id"] {
		resp.Result.Error = append(resp.Result.Error, app.BatchResultErrorEntry{Code: "InjectedFailure", Id: id, Message: "refused by goaws -fail-regex", SenderFault: false})
	}
	w.Header().Set("Content-Type", "application/xml")
	_ = xml.NewEncoder(w).Encode(resp)
}

func countEntries(f url.Values) int {
	return len(entryKeys(f, "SendMessageBatchRequestEntry", "MessageBody"))
}

// entryKeys returns the form keys prefix.<n>.field, in entry order.
func entryKeys(f url.Values, prefix, field string) []string {
	var idx []int
	for k := range f {
		parts := strings.SplitN(k, ".", 3)
		if len(parts) == 3 && parts[0] == prefix && parts[2] == field {
			if i, err := strconv.Atoi(parts[1]); err == nil {
				idx = append(idx, i)
			}
		}
	}
	sort.Ints(idx)
	keys := make([]string, len(idx))
	for j, i := range idx {
		keys[j] = fmt.Sprintf("%s.%d.%s", prefix, i, field)
	}
	return keys
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}

func received(body []byte) []EventMessage {
	var resp app.ReceiveMessageResponse
	if xml.Unmarshal(body, &resp) != nil {
		return nil
	}
	out := make([]EventMessage, 0, len(resp.Result.Message))
	for _, m := range resp.Result.Message {
		out = append(out, EventMessage{ID: m.MessageId, Receipt: m.ReceiptHandle, Body: string(m.Body)})
	}
	return out
}

func queueOf(req *http.Request) string {
	u := req.Form.Get("QueueUrl")
	if u == "" {
		u = req.URL.Path
	}
	if q := req.Form.Get("QueueName"); q != "" && u == "/" {
		return q
	}
	return u[strings.LastIndex(u, "/")+1:]
}

func (s *server) logEvent(ev Event) {
	if s.out == nil {
		return
	}
	s.seq++
	ev.Seq = s.seq
	ev.At = time.Now().UnixMilli()
	b, _ := json.Marshal(ev)
	_, _ = s.out.Write(append(b, '\n'))
}
