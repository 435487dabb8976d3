// Package sqstest starts a real SQS-compatible server for tests: goaws
// (github.com/Admiral-Piett/goaws v0.4.5), built from the hack/goaws module
// and run as its own process on a loopback port, with a JSON-lines log of
// every action it served (see hack/goaws), from which a test reads what a
// runner did on the server.
package sqstest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"

	"github.com/monovertex/monovertex/internal/sqsclient"
	"github.com/monovertex/monovertex/internal/testutil"
)

// Region is the region the tests name; goaws accepts any.
const Region = "us-east-1"

// Options are the server's settings.
type Options struct {
	// Queues are created at start.
	Queues []string
	// Visibility is the queues' visibility timeout; 0 means 30s. goaws
	// applies the queue's own to every receive.
	Visibility time.Duration
	// FailRegex refuses, per entry, SendMessageBatch entries whose body
	// matches it.
	FailRegex string
	// FailQueue limits FailRegex to one queue.
	FailQueue string
}

// Server is a running goaws.
type Server struct {
	// Endpoint is its base URL, for MV_SQS_ENDPOINT_URL.
	Endpoint string
	// Log is the path of its action log.
	Log  string
	proc *testutil.Process
	opts Options
	port int
	t    testing.TB
}

// Start builds and starts goaws; it is stopped when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{t: t, opts: opts, port: testutil.FreePort(t), Log: filepath.Join(t.TempDir(), "goaws.jsonl")}
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(s.port)
	s.start()
	return s
}

func (s *Server) start() {
	t := s.t
	t.Helper()
	vis := s.opts.Visibility
	if vis == 0 {
		vis = 30 * time.Second
	}
	args := []string{"-addr", "127.0.0.1:" + strconv.Itoa(s.port), "-queues", strings.Join(s.opts.Queues, ","),
		"-visibility", strconv.Itoa(int(vis / time.Second)), "-log", s.Log}
	if s.opts.FailRegex != "" {
		args = append(args, "-fail-regex", s.opts.FailRegex, "-fail-queue", s.opts.FailQueue)
	}
	s.proc = testutil.Start(t, "goaws", testutil.BuildTool(t, "hack/goaws", "."), nil, args...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("goaws not healthy on %s within 30s: %v\n%s", s.Endpoint, err, s.proc.Stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server, as a crash would; queues and messages are lost.
func (s *Server) Stop() { s.proc.Kill() }

// Restart starts a new server on the same port, with empty queues.
func (s *Server) Restart() { s.start() }

// Env returns the runner's variables that point the SQS source at queue
// on this server, with static test credentials and no instance metadata
// lookups.
func (s *Server) Env(queue string) map[string]string {
	return map[string]string{
		"MV_SQS_QUEUE_NAME": queue, "MV_SQS_REGION": Region, "MV_SQS_ENDPOINT_URL": s.Endpoint, "MV_SQS_PROTOCOL": "query",
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_EC2_METADATA_DISABLED": "true",
	}
}

// Client is an SQS client of the server.
func (s *Server) Client() *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, func(o *sqs.Options) {
		// New sets the JSON protocol after reading Options: only an
		// option function can replace it.
		o.Protocol = awsquery.New(schemas.AmazonSQS)
		o.HTTPClient = sqsclient.QueryHTTPClient()
	})
}

// URL is the URL of queue.
func (s *Server) URL(t testing.TB, queue string) string {
	t.Helper()
	out, err := s.Client().GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatalf("queue URL of %s: %v", queue, err)
	}
	return aws.ToString(out.QueueUrl)
}

// Send puts bodies into queue, ten to a call.
func (s *Server) Send(t testing.TB, queue string, bodies []string) {
	t.Helper()
	url, c := s.URL(t, queue), s.Client()
	for start := 0; start < len(bodies); start += 10 {
		chunk := bodies[start:min(start+10, len(bodies))]
		entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
		for i, b := range chunk {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
		}
		out, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			t.Fatalf("send to %s: %v", queue, err)
		}
		if len(out.Failed) > 0 {
			t.Fatalf("send to %s: %d entries refused", queue, len(out.Failed))
		}
	}
}

// Drain receives and deletes everything visible in queue until a receive
// comes back empty, and returns the bodies.
func (s *Server) Drain(t testing.TB, queue string) []string {
	t.Helper()
	url, c := s.URL(t, queue), s.Client()
	var bodies []string
	for range 100_000 {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatalf("receive from %s: %v", queue, err)
		}
		if len(out.Messages) == 0 {
			return bodies
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("delete from %s: %v", queue, err)
			}
		}
	}
	t.Fatalf("%s did not drain", queue)
	return nil
}

// Count is the number of messages queue holds, visible or not.
func (s *Server) Count(t testing.TB, queue string) int {
	t.Helper()
	out, err := s.Client().GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(s.URL(t, queue)), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages}})
	if err != nil {
		t.Fatalf("attributes of %s: %v", queue, err)
	}
	n, err := strconv.Atoi(out.Attributes["ApproximateNumberOfMessages"])
	if err != nil {
		t.Fatalf("ApproximateNumberOfMessages of %s: %v", queue, err)
	}
	return n
}

// Event is one action the server served (hack/goaws's log line).
type Event struct {
	Seq               int64          `json:"seq"`
	At                int64          `json:"at"`
	Action            string         `json:"action"`
	Queue             string         `json:"queue"`
	Status            int            `json:"status"`
	Receipt           string         `json:"receipt"`
	VisibilityTimeout string         `json:"visibility_timeout"`
	Receipts          []string       `json:"receipts"`
	Messages          []EventMessage `json:"messages"`
	Refused           []string       `json:"refused"`
}

// EventMessage is a message received or sent in an Event.
type EventMessage struct {
	ID      string `json:"id"`
	Receipt string `json:"receipt"`
	Body    string `json:"body"`
	// DelaySeconds is a sent entry's DelaySeconds field.
	DelaySeconds string `json:"delay_seconds"`
}

// Events reads the action log so far, in the order served.
func (s *Server) Events(t testing.TB) []Event {
	t.Helper()
	f, err := os.Open(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			// The last line may be half written.
			break
		}
		out = append(out, ev)
	}
	return out
}

// String names the server in failures.
func (s *Server) String() string { return fmt.Sprintf("goaws on %s", s.Endpoint) }
