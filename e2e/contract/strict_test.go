package contract_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sourcepb "github.com/numaproj/numaflow-go/pkg/apis/proto/source/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/monovertex/monovertex/internal/testutil"
)

// The strict source must catch what it is there to catch: a client that
// opens a second read stream while a Read call is running ends it.
func TestTheStrictSourceExitsWhenReadsOverlap(t *testing.T) {
	dir, err := os.MkdirTemp("", "mvct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src := testutil.Start(t, "example-udsource", testutil.Build(t, "./cmd/example-udsource"), map[string]string{
		"MV_UDS_DIR": dir, "EXAMPLE_TOTAL": "0", "EXAMPLE_STRICT_READS": "true",
	})
	sock := filepath.Join(dir, "source.sock")
	testutil.WaitFor(t, 60*time.Second, "the source's socket", func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Two read streams, each asking for a batch that never fills (the
	// source has no messages), so the first Read is still waiting when the
	// second starts.
	for i := 0; i < 2; i++ {
		c, err := sourcepb.NewSourceClient(cc).ReadFn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Send(&sourcepb.ReadRequest{Handshake: &sourcepb.Handshake{Sot: true}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Recv(); err != nil {
			t.Fatalf("handshake: %v", err)
		}
		if err := c.Send(&sourcepb.ReadRequest{Request: &sourcepb.ReadRequest_Request{NumRecords: 10, TimeoutInMs: 20_000}}); err != nil {
			t.Fatal(err)
		}
	}
	if code := src.Wait(20 * time.Second); code != 3 {
		t.Fatalf("the strict source exited with %d, want 3:\n%s", code, src.Stderr.String())
	}
	if !strings.Contains(src.Stderr.String(), "2 Read calls overlap") {
		t.Fatalf("the strict source did not say which calls overlapped:\n%s", src.Stderr.String())
	}
	t.Logf("%s", strings.TrimSpace(src.Stderr.String()[strings.LastIndex(strings.TrimSpace(src.Stderr.String()), "\n")+1:]))
}
