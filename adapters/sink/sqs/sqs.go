// Package sqs is a sink sending to an AWS SQS queue (MV_SINK=sqs, and as
// fallback or onSuccess sink), as Numaflow's spec.sink.sqs does
// (numaflow-core's sinker/sink/sqs.rs).
//
// Messages go ten to a SendMessageBatch call; SQS answers per entry, and a
// refused entry is that message's failure, retried with the sink's retry
// strategy, while the rest of its batch counts as written. A message's
// value is the body; the headers DelaySeconds, MessageGroupId and
// MessageDeduplicationId set those fields of its entry, as numaflow-sqs
// reads them.
package sqs

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/sqsclient"
	"github.com/monovertex/monovertex/runner"
)

// The headers that set fields of a message's SendMessageBatch entry
// (numaflow-sqs's HEADER_* constants).
const (
	HeaderDelaySeconds           = "DelaySeconds"
	HeaderMessageGroupID         = "MessageGroupId"
	HeaderMessageDeduplicationID = "MessageDeduplicationId"
)

// maxBatch is the most entries one SendMessageBatch takes.
const maxBatch = 10

// Config holds the SQS sink's settings (Numaflow's spec.sink.sqs, and the
// fallback's and onSuccess sink's).
type Config struct {
	// Roles is what each role reads: MV_SQS_SINK_*, and the fallback's
	// and onSuccess sink's MV_FALLBACK_SQS_* and MV_ON_SUCCESS_SQS_*.
	runner.Roles[Target]
	Protocol string `envconfig:"MV_SQS_PROTOCOL" default:"json" desc:"wire protocol of the SQS endpoints (source and sinks): json, SQS's own, or query for older SQS-compatible servers"`
}

// Target is what the SQS sink reads for each role (see runner.RoleVar).
type Target struct {
	Queue      string `envconfig:"QUEUE_NAME" desc:"name of the SQS queue the sink sends to (Numaflow's spec.sink.sqs.queueName)"`
	Region     string `envconfig:"REGION" desc:"AWS region of the sink's queue (awsRegion); the fallback's and onSuccess sink's default to it"`
	Account    string `envconfig:"QUEUE_OWNER_ACCOUNT_ID" desc:"AWS account ID owning the sink's queue (queueOwnerAWSAccountID); empty: the caller's"`
	Endpoint   string `envconfig:"ENDPOINT_URL" desc:"SQS endpoint URL of the sink instead of AWS's; the fallback's and onSuccess sink's default to it"`
	AssumeRole string `envconfig:"ASSUME_ROLE" desc:"STS role the sink assumes, as Numaflow's assumeRole in JSON (see MV_SQS_ASSUME_ROLE)"`
}

// RoleKind is the KIND in the names of Target's variables.
func (Target) RoleKind() string { return "SQS" }

// Target is the queue the sink in role sends to: the role's own, with the
// sink's region and endpoint where it sets none.
func (c *Config) Target(role runner.Role) sqsclient.Target {
	t := c.Of(role)
	region, regionVar := c.Inherit(role, func(t *Target) *string { return &t.Region })
	endpoint, endpointVar := c.Inherit(role, func(t *Target) *string { return &t.Endpoint })
	return sqsclient.Target{
		Queue: t.Queue, QueueVar: c.Var(&t.Queue), Region: region, RegionVar: regionVar,
		Account: t.Account, Endpoint: endpoint, EndpointVar: endpointVar,
		AssumeRole: t.AssumeRole, AssumeRoleVar: c.Var(&t.AssumeRole), Protocol: c.Protocol, ProtocolVar: "MV_SQS_PROTOCOL",
	}
}

// Validate checks the values that parse but cannot be used in role.
func (c *Config) Validate(role runner.Role) error { return c.Target(role).Validate() }

func init() {
	runner.RegisterSink("sqs", func(ctx context.Context, env runner.Env, cfg *Config) (runner.Sink, error) {
		return New(ctx, cfg.Target(env.Role), env.Logger)
	})
}

// Sink sends to one SQS queue.
type Sink struct {
	client *sqs.Client
	target sqsclient.Target
	log    *zap.SugaredLogger
	// url is the queue's, set by Connect.
	url string
}

var _ runner.Connector = (*Sink)(nil)

// New builds the client for the queue t names; Connect looks the queue up.
func New(ctx context.Context, t sqsclient.Target, log *zap.SugaredLogger) (*Sink, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	client, err := sqsclient.New(ctx, t, log)
	if err != nil {
		return nil, err
	}
	return &Sink{client: client, target: t, log: log}, nil
}

// Connect looks up the queue's URL. A queue or service that does not
// answer fails the attempt, and the engine tries again.
func (s *Sink) Connect(ctx context.Context) error {
	if s.url != "" {
		return nil
	}
	url, err := sqsclient.QueueURL(ctx, s.client, s.target)
	if err != nil {
		return err
	}
	s.log.Infow("sqs sink sending", "queue_url", url)
	s.url = url
	return nil
}

// Write sends msgs ten to a call and reports each entry's outcome; a call
// that fails as a whole fails the messages of that call only.
func (s *Sink) Write(ctx context.Context, msgs []*runner.Message) ([]runner.WriteResult, error) {
	results := make([]runner.WriteResult, len(msgs))
	for start := 0; start < len(msgs); start += maxBatch {
		chunk := msgs[start:min(start+maxBatch, len(msgs))]
		s.send(ctx, chunk, results[start:start+len(chunk)])
	}
	return results, nil
}

func (s *Sink) send(ctx context.Context, msgs []*runner.Message, results []runner.WriteResult) {
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = entry(i, m)
	}
	out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
	if err != nil {
		err = fmt.Errorf("sqs: send %d messages to %s: %w", len(msgs), s.url, sqsclient.Explain(err))
		for i := range results {
			results[i] = runner.WriteResult{Status: runner.WriteFailed, Err: err}
		}
		return
	}
	done := make([]bool, len(msgs))
	for _, ok := range out.Successful {
		if i, found := entryIndex(ok.Id, len(msgs)); found {
			done[i] = true
		}
	}
	for _, f := range out.Failed {
		if i, found := entryIndex(f.Id, len(msgs)); found && !done[i] {
			done[i] = true
			results[i] = runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("sqs: %s refused message %s: %s: %s (sender fault: %t)",
				s.url, msgs[i].ID, aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault)}
		}
	}
	for i, d := range done {
		if !d {
			results[i] = runner.WriteResult{Status: runner.WriteFailed, Err: fmt.Errorf("sqs: %s answered nothing for message %s", s.url, msgs[i].ID)}
		}
	}
}

// entry is message i's SendMessageBatch entry, with numaflow-sqs's
// header-set fields; a DelaySeconds that is not a whole number from 0 is
// ignored, as there.
func entry(i int, m *runner.Message) types.SendMessageBatchRequestEntry {
	e := types.SendMessageBatchRequestEntry{Id: aws.String("msg_" + strconv.Itoa(i)), MessageBody: aws.String(string(m.Value))}
	if d, err := strconv.ParseInt(m.Headers[HeaderDelaySeconds], 10, 32); err == nil && d >= 0 {
		e.DelaySeconds = int32(d)
	}
	if g := m.Headers[HeaderMessageGroupID]; g != "" {
		e.MessageGroupId = aws.String(g)
	}
	if d := m.Headers[HeaderMessageDeduplicationID]; d != "" {
		e.MessageDeduplicationId = aws.String(d)
	}
	return e
}

func entryIndex(id *string, n int) (int, bool) {
	i, err := strconv.Atoi(strings.TrimPrefix(aws.ToString(id), "msg_"))
	return i, err == nil && i >= 0 && i < n
}

// Close releases nothing: the client holds only idle HTTP connections.
func (s *Sink) Close(context.Context) error { return nil }
