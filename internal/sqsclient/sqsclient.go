// Package sqsclient builds the AWS SQS client that the SQS source and sink
// share, as numaflow-core's numaflow-sqs crate does: the region given, the
// default credential chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
// which a Numaflow spec sets from a Secret, a web identity, the instance
// role) or an STS assume-role on top of it, and an endpoint URL override.
package sqsclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/schemas"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	ststypes "github.com/aws/aws-sdk-go-v2/service/sts/types"
	smithy "github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/transport/http/protocol/awsquery"

	"go.uber.org/zap"

	"github.com/monovertex/monovertex/runner"
)

// AssumeRole is Numaflow's AWSAssumeRole, with its JSON names: the variable
// that carries it (MV_SQS_ASSUME_ROLE and the sinks' own) holds it as JSON,
// so mvctl copies spec.source.sqs.assumeRole over unchanged.
type AssumeRole struct {
	RoleARN         string   `json:"roleArn"`
	SessionName     *string  `json:"sessionName,omitempty"`
	DurationSeconds *int32   `json:"durationSeconds,omitempty"`
	ExternalID      *string  `json:"externalID,omitempty"`
	Policy          *string  `json:"policy,omitempty"`
	PolicyARNs      []string `json:"policyArns,omitempty"`
}

// defaultSessionName is numaflow-sqs's session name when none is given.
const defaultSessionName = "numaflow-sqs-client"

// Target is one queue and how to reach it, with the name of the variable
// each value came from, for the one line an invalid value exits with.
type Target struct {
	Queue, QueueVar           string
	Region, RegionVar         string
	Account                   string // queueOwnerAWSAccountID; may be empty
	Endpoint, EndpointVar     string
	AssumeRole, AssumeRoleVar string // JSON, may be empty
	Protocol, ProtocolVar     string // "json" (default) or "query"
}

// Validate checks what parses but cannot be used.
func (t Target) Validate() error {
	switch {
	case strings.TrimSpace(t.Queue) == "":
		return &runner.ConfigError{Var: t.QueueVar, Value: t.Queue, Reason: "is required: the name of the SQS queue"}
	case strings.TrimSpace(t.Region) == "":
		return &runner.ConfigError{Var: t.RegionVar, Value: t.Region, Reason: "is required: the AWS region of the queue, e.g. us-west-2"}
	case t.Protocol != "json" && t.Protocol != "query":
		return &runner.ConfigError{Var: t.ProtocolVar, Value: t.Protocol, Reason: "must be json (SQS's own) or query (older SQS-compatible servers)"}
	}
	if t.Endpoint != "" {
		if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &runner.ConfigError{Var: t.EndpointVar, Value: t.Endpoint, Reason: "must be an http or https URL, e.g. http://localstack:4566"}
		}
	}
	if _, err := t.assumeRole(); err != nil {
		return &runner.ConfigError{Var: t.AssumeRoleVar, Value: t.AssumeRole, Reason: err.Error()}
	}
	return nil
}

// assumeRole parses the assume-role JSON; nil when none is set.
func (t Target) assumeRole() (*AssumeRole, error) {
	if strings.TrimSpace(t.AssumeRole) == "" {
		return nil, nil
	}
	var ar AssumeRole
	dec := json.NewDecoder(strings.NewReader(t.AssumeRole))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ar); err != nil {
		return nil, fmt.Errorf(`must be Numaflow's assumeRole as JSON, e.g. {"roleArn":"arn:aws:iam::123456789012:role/r"}: %v`, err)
	}
	if !strings.HasPrefix(ar.RoleARN, "arn:") {
		return nil, errors.New("roleArn must be a role ARN, e.g. arn:aws:iam::123456789012:role/r")
	}
	if d := ar.DurationSeconds; d != nil && (*d < 900 || *d > 43200) {
		return nil, fmt.Errorf("durationSeconds %d must be from 900 to 43200", *d)
	}
	return &ar, nil
}

// New builds the client; it sends nothing (QueueURL does).
// The SDK's own log lines (such as a body left unread by a cancelled long
// poll) go to log at debug level instead of to stderr.
func New(ctx context.Context, t Target, log *zap.SugaredLogger) (*sqs.Client, error) {
	ar, err := t.assumeRole()
	if err != nil {
		return nil, err
	}
	sdkLog := logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		log.Debugw(fmt.Sprintf(format, v...), "aws_sdk", string(c))
	})
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(t.Region), awsconfig.WithLogger(sdkLog))
	if err != nil {
		return nil, fmt.Errorf("sqs: load AWS configuration: %w", err)
	}
	if ar != nil {
		stsClient := sts.NewFromConfig(cfg, func(o *sts.Options) {
			if t.Endpoint != "" {
				o.BaseEndpoint = aws.String(t.Endpoint)
			}
		})
		cfg.Credentials = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(stsClient, ar.RoleARN, func(o *stscreds.AssumeRoleOptions) {
			o.RoleSessionName = defaultSessionName
			if ar.SessionName != nil {
				o.RoleSessionName = *ar.SessionName
			}
			if ar.DurationSeconds != nil {
				o.Duration = time.Duration(*ar.DurationSeconds) * time.Second
			}
			o.ExternalID = ar.ExternalID
			o.Policy = ar.Policy
			for _, arn := range ar.PolicyARNs {
				o.PolicyARNs = append(o.PolicyARNs, ststypes.PolicyDescriptorType{Arn: aws.String(arn)})
			}
		}))
	}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if t.Endpoint != "" {
			o.BaseEndpoint = aws.String(t.Endpoint)
		}
		if t.Protocol == "query" {
			o.Protocol = awsquery.New(schemas.AmazonSQS)
			o.HTTPClient = QueryHTTPClient()
		}
	})
	return client, nil
}

// QueueURL looks up the queue's URL, as numaflow-sqs does before the
// first read or write, waiting at most 30s.
func QueueURL(ctx context.Context, client *sqs.Client, t Target) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(t.Queue)}
	if t.Account != "" {
		in.QueueOwnerAWSAccountId = aws.String(t.Account)
	}
	out, err := client.GetQueueUrl(ctx, in)
	if err != nil {
		return "", fmt.Errorf("sqs: get the URL of queue %q: %w", t.Queue, Explain(err))
	}
	return aws.ToString(out.QueueUrl), nil
}

// Explain shortens an AWS error to "Code: message" where SQS answered, as
// numaflow-sqs's extract_aws_error does, and leaves others as they are.
func Explain(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return fmt.Errorf("%s: %s", ae.ErrorCode(), ae.ErrorMessage())
	}
	return err
}

// QueryHTTPClient is the HTTP client for SQS's query protocol: it reads
// each answer whole before the SDK deserializes it (see wholeBodies).
func QueryHTTPClient() *http.Client {
	return &http.Client{Transport: wholeBodies{http.DefaultTransport}}
}

// wholeBodies reads each response body whole before the SDK sees it. With
// the query protocol, smithy-go v1.28.9's deserializer at times read a
// chunked ReceiveMessage answer as empty, with no error (its messages then
// stayed hidden until their visibility timeout ran out: 2 answers of 25
// in a test against goaws); read from memory it never did, in 10 runs.
type wholeBodies struct{ next http.RoundTripper }

// RoundTrip reads the answer's body into memory.
func (w wholeBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	return resp, nil
}
