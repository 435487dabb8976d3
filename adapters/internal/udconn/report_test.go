package udconn

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/monovertex/monovertex/runner"
)

func TestContainerErrorKeepsTheSDKPanicStack(t *testing.T) {
	// What numaflow-go v0.12's servers answer when a handler panics.
	st, err := status.Newf(codes.Internal, "UDF_EXECUTION_ERROR(udsink): %v", "boom").WithDetails(&errdetails.DebugInfo{Detail: "goroutine 7 [running]:\nmain.handler()"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want runner.ContainerError
	}{
		{"panic status", st.Err(), runner.ContainerError{Code: "Internal error", Message: "UDF_EXECUTION_ERROR(udsink): boom", Details: "goroutine 7 [running]:\nmain.handler()"}},
		{"wrapped panic status", fmt.Errorf("udsink: SinkFn: %w", st.Err()), runner.ContainerError{Code: "Internal error",
			Message: "udsink: SinkFn: rpc error: code = Internal desc = UDF_EXECUTION_ERROR(udsink): boom", Details: "goroutine 7 [running]:\nmain.handler()"}},
		{"plain status", status.Error(codes.Unavailable, "connection reset"), runner.ContainerError{Code: "The service is currently unavailable", Message: "connection reset"}},
		{"closed stream", ErrContainerClosedStream, runner.ContainerError{Code: "Unknown error", Message: "the container closed the stream"}},
		{"timeout", fmt.Errorf("no answer: %w", context.DeadlineExceeded), runner.ContainerError{Code: "Deadline expired before operation could complete", Message: "no answer: context deadline exceeded"}},
	} {
		if got := ContainerError(tc.err); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

type reports []runner.ContainerError

func (r *reports) ReportContainerError(e runner.ContainerError) { *r = append(*r, e) }

func TestConnReportsUnderTheNumaflowContainerName(t *testing.T) {
	var got reports
	c := &Conn{ep: SinkEndpoint(t.TempDir(), true)}
	c.report(status.Error(codes.Internal, "before ReportTo")) // nobody to report to yet
	c.ReportTo(&got, runner.RoleFallbackSink)
	c.report(status.Error(codes.Internal, "UDF_EXECUTION_ERROR(fb-udsink): boom"))
	c.report(context.Canceled)                          // the runner's own cancel
	c.report(status.Error(codes.Canceled, "cancelled")) // likewise
	want := runner.ContainerError{Container: "fb-udsink", Stage: "fallback-sink", Code: "Internal error", Message: "UDF_EXECUTION_ERROR(fb-udsink): boom",
		Reason: runner.ReasonSinkRuntime}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("reports %+v, want only %+v", got, want)
	}
}
