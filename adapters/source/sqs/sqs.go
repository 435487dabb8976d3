// Package sqs is a source reading an AWS SQS queue (MV_SOURCE=sqs), as
// Numaflow's spec.source.sqs does (numaflow-core's source/sqs.rs).
//
// A message is deleted from the queue only once it is final (its ack); a
// nack with a delay sets the message's visibility timeout to the delay
// rounded up to whole seconds, as numaflow-core does, so SQS redelivers it
// then; a nack without one makes no SQS call, and SQS redelivers the
// message once the visibility timeout of its receive runs out. Pending is
// the queue's ApproximateNumberOfMessages.
//
// Each message's ID is its SQS MessageId, the same on every redelivery
// (under MV_MESSAGE_IDS=numaflow, numaflow-core's offset string, the
// receipt handle and the replica: "<receipt handle>-<replica>"); its one
// key is the MessageId, its headers the system attributes asked for, its
// user metadata group "sqs" the string message attributes, and its event
// time the SentTimestamp attribute (else the time of the read).
package sqs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/zap"

	"github.com/monovertex/monovertex/internal/sqsclient"
	"github.com/monovertex/monovertex/runner"
)

// MetadataGroup is the user metadata group holding the message
// attributes, numaflow-sqs's SQS_METADATA_KEY.
const MetadataGroup = "sqs"

// maxBatch is the most messages one ReceiveMessage or batch call takes.
const maxBatch = 10

// Config holds the SQS source's settings (Numaflow's spec.source.sqs).
type Config struct {
	Queue      string `envconfig:"MV_SQS_QUEUE_NAME" desc:"name of the SQS queue to read (Numaflow's queueName)"`
	Region     string `envconfig:"MV_SQS_REGION" desc:"AWS region of the queue, e.g. us-west-2 (awsRegion)"`
	Account    string `envconfig:"MV_SQS_QUEUE_OWNER_ACCOUNT_ID" desc:"AWS account ID owning the queue (queueOwnerAWSAccountID); empty: the caller's"`
	Endpoint   string `envconfig:"MV_SQS_ENDPOINT_URL" desc:"SQS endpoint URL instead of AWS's (endpointUrl), e.g. a VPC endpoint or a local SQS-compatible server"`
	AssumeRole string `envconfig:"MV_SQS_ASSUME_ROLE" desc:"STS role to assume on top of the default credential chain, as Numaflow's assumeRole in JSON: {\"roleArn\":...,\"sessionName\":...,\"durationSeconds\":...,\"externalID\":...,\"policy\":...,\"policyArns\":[...]}"`
	Protocol   string `envconfig:"MV_SQS_PROTOCOL" default:"json" desc:"wire protocol of the SQS endpoints (source and sinks): json, SQS's own, or query for older SQS-compatible servers"`
	// Visibility is -1 for the queue's own timeout.
	Visibility  int    `envconfig:"MV_SQS_VISIBILITY_TIMEOUT" default:"-1" desc:"seconds a received message stays hidden from other reads (visibilityTimeout, 0 to 43200); -1: the queue's own"`
	MaxMessages int    `envconfig:"MV_SQS_MAX_NUMBER_OF_MESSAGES" default:"10" desc:"most messages one ReceiveMessage returns (maxNumberOfMessages, 1 to 10); a read makes several calls to fill MV_READ_BATCH_SIZE"`
	WaitTime    int    `envconfig:"MV_SQS_WAIT_TIME_SECONDS" default:"20" desc:"longest long poll of a ReceiveMessage (waitTimeSeconds, 0 to 20); a read waits no longer than MV_READ_TIMEOUT rounded up to a second, as numaflow-core does"`
	Attributes  string `envconfig:"MV_SQS_ATTRIBUTE_NAMES" default:"All" desc:"comma-separated system attributes to receive with each message, which become its headers (attributeNames)"`
	MsgAttrs    string `envconfig:"MV_SQS_MESSAGE_ATTRIBUTE_NAMES" default:"All" desc:"comma-separated message attributes to receive with each message, which become its user metadata group sqs (messageAttributeNames)"`
	// MessageIDs is how the runner forms message IDs (set from
	// runner.Env, not from the environment).
	MessageIDs runner.MessageIDs `ignored:"true"`
	// Replica is MV_REPLICA, the partition of numaflow-core's offsets.
	Replica int `ignored:"true"`
}

// Target is the queue the source reads and how to reach it.
func (c *Config) Target() sqsclient.Target {
	return sqsclient.Target{
		Queue: c.Queue, QueueVar: "MV_SQS_QUEUE_NAME", Region: c.Region, RegionVar: "MV_SQS_REGION",
		Account: c.Account, Endpoint: c.Endpoint, EndpointVar: "MV_SQS_ENDPOINT_URL",
		AssumeRole: c.AssumeRole, AssumeRoleVar: "MV_SQS_ASSUME_ROLE", Protocol: c.Protocol, ProtocolVar: "MV_SQS_PROTOCOL",
	}
}

// Validate checks the values that parse but cannot be used.
func (c *Config) Validate(runner.Role) error {
	if err := c.Target().Validate(); err != nil {
		return err
	}
	switch {
	case c.Visibility < -1 || c.Visibility > 43200:
		return &runner.ConfigError{Var: "MV_SQS_VISIBILITY_TIMEOUT", Value: strconv.Itoa(c.Visibility), Reason: "must be from 0 to 43200 seconds, or -1 for the queue's own"}
	case c.MaxMessages < 1 || c.MaxMessages > maxBatch:
		return &runner.ConfigError{Var: "MV_SQS_MAX_NUMBER_OF_MESSAGES", Value: strconv.Itoa(c.MaxMessages), Reason: "must be from 1 to 10"}
	case c.WaitTime < 0 || c.WaitTime > 20:
		return &runner.ConfigError{Var: "MV_SQS_WAIT_TIME_SECONDS", Value: strconv.Itoa(c.WaitTime), Reason: "must be from 0 to 20 seconds"}
	}
	return nil
}

func init() {
	runner.RegisterSource("sqs", func(ctx context.Context, env runner.Env, cfg *Config) (runner.Source, error) {
		cfg.MessageIDs, cfg.Replica = env.MessageIDs, env.Replica
		return New(ctx, *cfg, env.Logger)
	})
}

// Source reads one SQS queue.
type Source struct {
	cfg    Config
	client *sqs.Client
	url    string
	log    *zap.SugaredLogger

	systemAttrs []types.MessageSystemAttributeName
	msgAttrs    []string

	warnOnce  sync.Once
	closeOnce sync.Once
	closed    chan struct{}
}

var _ runner.Connector = (*Source)(nil)

// New builds the client for the queue named in cfg; Connect looks the
// queue up.
func New(ctx context.Context, cfg Config, log *zap.SugaredLogger) (*Source, error) {
	if log == nil {
		log = zap.NewNop().Sugar()
	}
	client, err := sqsclient.New(ctx, cfg.Target(), log)
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, client: client, log: log, closed: make(chan struct{}), msgAttrs: names(cfg.MsgAttrs)}
	for _, n := range names(cfg.Attributes) {
		s.systemAttrs = append(s.systemAttrs, types.MessageSystemAttributeName(n))
	}
	return s, nil
}

// Connect looks up the queue's URL. A queue or service that does not
// answer fails the attempt, and the engine tries again.
func (s *Source) Connect(ctx context.Context) error {
	if s.url != "" {
		return nil
	}
	url, err := sqsclient.QueueURL(ctx, s.client, s.cfg.Target())
	if err != nil {
		return err
	}
	s.log.Infow("sqs source reading", "queue_url", url)
	s.url = url
	return nil
}

// offset is what the source needs back in Ack and Nack.
type offset struct{ receipt string }

// Read receives up to n messages, calling ReceiveMessage until it has
// them or a call returns none; only the first call long-polls, for the
// read timeout rounded up to whole seconds (at least 1, at most
// MV_SQS_WAIT_TIME_SECONDS), as numaflow-core's does.
func (s *Source) Read(ctx context.Context, n int, timeout time.Duration) ([]*runner.Message, error) {
	select {
	case <-s.closed:
		return nil, errors.New("sqs: source closed")
	default:
	}
	wait := int32(min(max(math.Ceil(timeout.Seconds()), 1), float64(s.cfg.WaitTime)))
	var out []*runner.Message
	for len(out) < n {
		in := &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(s.url),
			MaxNumberOfMessages:         int32(min(n-len(out), s.cfg.MaxMessages)),
			WaitTimeSeconds:             wait,
			MessageSystemAttributeNames: s.systemAttrs,
			MessageAttributeNames:       s.msgAttrs,
		}
		if s.cfg.Visibility >= 0 {
			in.VisibilityTimeout = int32(s.cfg.Visibility)
		}
		res, err := s.client.ReceiveMessage(ctx, in)
		if err != nil {
			if len(out) > 0 {
				// What was received is hidden until its visibility runs
				// out: hand it on rather than have it wait.
				return out, nil
			}
			return nil, fmt.Errorf("sqs: receive from %s: %w", s.url, sqsclient.Explain(err))
		}
		for i := range res.Messages {
			out = append(out, s.message(&res.Messages[i]))
		}
		if len(res.Messages) == 0 {
			break
		}
		wait = 0
	}
	return out, nil
}

// names splits a comma-separated list.
func names(list string) []string {
	var out []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

func (s *Source) message(m *types.Message) *runner.Message {
	id, receipt := aws.ToString(m.MessageId), aws.ToString(m.ReceiptHandle)
	msg := &runner.Message{
		ID:        id,
		Keys:      []string{id},
		Value:     []byte(aws.ToString(m.Body)),
		EventTime: time.Now(),
		Offset:    offset{receipt: receipt},
	}
	if s.cfg.MessageIDs == runner.NumaflowIDs {
		msg.ID = receipt + "-" + strconv.Itoa(s.cfg.Replica)
	}
	if len(m.Attributes) > 0 {
		msg.Headers = make(map[string]string, len(m.Attributes))
		for k, v := range m.Attributes {
			msg.Headers[k] = v
		}
		if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
			msg.EventTime = time.UnixMilli(ms)
		}
	}
	if len(m.MessageAttributes) > 0 {
		group := make(map[string][]byte, len(m.MessageAttributes))
		for k, v := range m.MessageAttributes {
			if v.StringValue != nil {
				group[k] = []byte(*v.StringValue)
			}
		}
		msg.Metadata = &runner.Metadata{User: map[string]map[string][]byte{MetadataGroup: group}}
	}
	return msg
}

// receipts returns the receipt handles of msgs; messages this source did
// not read have none and are skipped.
func receipts(msgs []*runner.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if o, ok := m.Offset.(offset); ok && o.receipt != "" {
			out = append(out, o.receipt)
		}
	}
	return out
}

// Ack deletes msgs from the queue, ten to a DeleteMessageBatch call. An
// entry SQS refuses fails the ack (the engine retries it; a message whose
// receipt expired is redelivered and deleted then).
func (s *Source) Ack(ctx context.Context, msgs []*runner.Message) error {
	rs := receipts(msgs)
	var failed []string
	for start := 0; start < len(rs); start += maxBatch {
		chunk := rs[start:min(start+maxBatch, len(rs))]
		entries := make([]types.DeleteMessageBatchRequestEntry, len(chunk))
		for i, r := range chunk {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r)}
		}
		res, err := s.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.url), Entries: entries})
		if err != nil {
			return fmt.Errorf("sqs: delete %d messages from %s: %w", len(chunk), s.url, sqsclient.Explain(err))
		}
		for _, f := range res.Failed {
			failed = append(failed, fmt.Sprintf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("sqs: %d of %d deletes from %s refused, first: %s", len(failed), len(rs), s.url, failed[0])
	}
	return nil
}

// Nack hands msgs back: with a delay, by setting their visibility timeout
// to it, rounded up to whole seconds; without one, it makes no call and
// SQS redelivers them when the visibility timeout of their receive ends,
// as numaflow-core does. A MaxDeliveries is left to the queue's redrive
// policy (its maxReceiveCount), which is SQS's own delivery limit.
func (s *Source) Nack(ctx context.Context, msgs []*runner.Message, n runner.Nack) error {
	delay := n.Delay
	if delay <= 0 {
		return nil
	}
	secs := int32(math.Ceil(delay.Seconds()))
	if time.Duration(secs)*time.Second != delay {
		s.warnOnce.Do(func() {
			s.log.Warnw("SQS visibility timeouts are whole seconds; rounding the nack delay up", "requested_delay", delay, "visibility_timeout_seconds", secs)
		})
	}
	// One call per message, as numaflow-core makes them: a receipt that
	// expired fails its own call only.
	var errs []error
	for _, r := range receipts(msgs) {
		_, err := s.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(s.url), ReceiptHandle: aws.String(r), VisibilityTimeout: secs})
		if err != nil {
			errs = append(errs, sqsclient.Explain(err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("sqs: change the visibility of %d of %d messages in %s: %w", len(errs), len(msgs), s.url, errs[0])
	}
	return nil
}

// Pending is the queue's ApproximateNumberOfMessages.
func (s *Source) Pending(ctx context.Context) (int64, error) {
	res, err := s.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(s.url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		return -1, fmt.Errorf("sqs: queue attributes of %s: %w", s.url, sqsclient.Explain(err))
	}
	v, ok := res.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)]
	if !ok {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1, fmt.Errorf("sqs: ApproximateNumberOfMessages %q of %s: %w", v, s.url, err)
	}
	return n, nil
}

// Close stops reading; the client holds no connection that needs closing
// beyond idle HTTP ones.
func (s *Source) Close(context.Context) error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

var (
	_ runner.Nacker        = (*Source)(nil)
	_ runner.PendingReader = (*Source)(nil)
)
