package udconn

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/monovertex/monovertex/runner"
)

// ReportTo makes the connection report its container's runtime errors (a
// stream that broke, a call that failed as a whole) to r, as errors of the
// runner stage stage. A nil r reports nothing.
func (c *Conn) ReportTo(r runner.ErrorReporter, stage runner.Role) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reporter, c.stage = r, string(stage)
}

// report hands err to the reporter as the container's runtime error.
func (c *Conn) report(err error) {
	c.mu.Lock()
	r, stage, closed := c.reporter, c.stage, c.closed
	c.mu.Unlock()
	// A stream the runner itself cancelled (shutdown, a caller that gave
	// up) is not the container's error.
	if r == nil || err == nil || closed || errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return
	}
	ce := ContainerError(err)
	ce.Container, ce.Stage, ce.Reason = c.ep.Numaflow, stage, c.ep.Reason
	r.ReportContainerError(ce)
}

// ContainerError is err as Numaflow's errors API shows it: the gRPC status
// code as numaflow-core words it, its message, and as details the google.rpc.DebugInfo the
// numaflow-go SDK servers attach to a handler panic (its stack), as
// numaflow-core's runtime errors do. An error that is not a gRPC status
// (the container closed the stream, a call timed out) is Unknown, or
// DeadlineExceeded, with its text as the message.
func ContainerError(err error) runner.ContainerError {
	st, ok := status.FromError(err)
	if !ok {
		code := codes.Unknown
		if errors.Is(err, context.DeadlineExceeded) {
			code = codes.DeadlineExceeded
		}
		return runner.ContainerError{Code: codeText(code), Message: err.Error()}
	}
	var details []string
	for _, d := range st.Details() {
		if di, ok := d.(*errdetails.DebugInfo); ok {
			if di.GetDetail() != "" {
				details = append(details, di.GetDetail())
			}
			if len(di.GetStackEntries()) > 0 {
				details = append(details, strings.Join(di.GetStackEntries(), "\n"))
			}
		}
	}
	return runner.ContainerError{Code: codeText(st.Code()), Message: st.Message(), Details: strings.Join(details, "\n")}
}

// codeText is a gRPC code as numaflow-core writes it into its runtime
// errors: tonic's Code description ("Internal error"), so the errors read
// the same as in Numaflow's UI.
func codeText(c codes.Code) string {
	if t, ok := tonicCodeText[c]; ok {
		return t
	}
	return c.String()
}

var tonicCodeText = map[codes.Code]string{
	codes.OK:                 "The operation completed successfully",
	codes.Canceled:           "The operation was cancelled",
	codes.Unknown:            "Unknown error",
	codes.InvalidArgument:    "Client specified an invalid argument",
	codes.DeadlineExceeded:   "Deadline expired before operation could complete",
	codes.NotFound:           "Some requested entity was not found",
	codes.AlreadyExists:      "Some entity that we attempted to create already exists",
	codes.PermissionDenied:   "The caller does not have permission to execute the specified operation",
	codes.ResourceExhausted:  "Some resource has been exhausted",
	codes.FailedPrecondition: "The system is not in a state required for the operation's execution",
	codes.Aborted:            "The operation was aborted",
	codes.OutOfRange:         "Operation was attempted past the valid range",
	codes.Unimplemented:      "Operation is not implemented or not supported",
	codes.Internal:           "Internal error",
	codes.Unavailable:        "The service is currently unavailable",
	codes.DataLoss:           "Unrecoverable data loss or corruption",
	codes.Unauthenticated:    "The request does not have valid authentication credentials",
}
