package nats_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/runner"
)

// Each message gets a fresh unique ID: a NUID by default; under
// MV_MESSAGE_IDS=numaflow numaflow-core's offset string, a random UUID v4
// as numaflow-nats makes (lower-case, hyphenated) followed by
// "-<replica>".
func TestIDsAreUniqueInTheFormOfTheMode(t *testing.T) {
	for _, tc := range []struct {
		ids  runner.MessageIDs
		want *regexp.Regexp
	}{
		{runner.SourceIDs, regexp.MustCompile(`^[0-9A-Za-z]{22}$`)},
		{runner.NumaflowIDs, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-3$`)},
	} {
		t.Run(string(tc.ids), func(t *testing.T) {
			srv := natstest.Start(t)
			nc, _ := srv.Connect(t)
			cfg := testConfig(srv.URL(), "ids")
			cfg.MessageIDs, cfg.Replica = tc.ids, 3
			src := newSource(t, cfg, nil)
			publish(t, srv, nc, "ids", 200, "v")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			seen := map[string]bool{}
			for _, m := range adaptertest.ReadN(t, ctx, src, 200, false) {
				if !tc.want.MatchString(m.ID) || seen[m.ID] {
					t.Fatalf("ID %q twice or not of the form %v", m.ID, tc.want)
				}
				seen[m.ID] = true
			}
		})
	}
}
