package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/monovertex/monovertex/adapters/transformer/udmap"
	"github.com/monovertex/monovertex/runner"
)

func TestParseTagRules(t *testing.T) {
	rules, err := parseTagRules(defaultTagRules)
	if err != nil || fmt.Sprint(rules) != "[{5 0 fallback} {5 1 onsuccess} {5 3 sink}]" {
		t.Fatalf("default rules: %v, %v", rules, err)
	}
	if rules, err := parseTagRules("none"); err != nil || rules != nil {
		t.Errorf("none: %v, %v", rules, err)
	}
	for _, bad := range []string{"5:0", "0:1=x", "a:1=x", "5:-1=x", "5:1=", "5=x"} {
		if _, err := parseTagRules(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// shortDir is a socket directory whose paths fit the 108 bytes of a Unix
// socket path (t.TempDir's may not).
func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "mvmap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// The rules through the real SDK servers and the udmap adapter, in every
// mode, on values as example-udsource makes them.
func TestRulesInEveryMode(t *testing.T) {
	rules, _ := parseTagRules(defaultTagRules)
	for _, mode := range []string{"unary", "batch", "stream"} {
		t.Run(mode, func(t *testing.T) {
			dir := shortDir(t)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- serve(ctx, dir, mode, &mapping{dropEvery: 10, fanoutEvery: 10, tags: rules}) }()
			t.Cleanup(func() {
				cancel()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					t.Errorf("server did not stop")
				}
			})
			nctx, ncancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer ncancel()
			var cfg udmap.Config // its settings type is internal to the adapters
			cfg.Dir, cfg.MaxMessageSize = dir, 64<<20
			cfg.StartupTimeout, cfg.ReconnectTimeout, cfg.CallTimeout = 20*time.Second, 20*time.Second, 20*time.Second
			tr, err := udmap.New(nctx, cfg.Settings, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close(context.Background())
			if err := tr.Connect(nctx); err != nil {
				t.Fatal(err)
			}
			var in []*runner.Message
			for n := 0; n < 20; n++ {
				in = append(in, &runner.Message{ID: fmt.Sprint(n), Keys: []string{"k"}, Value: []byte(fmt.Sprintf("%d:xxxx", n))})
			}
			res, err := tr.Transform(nctx, in)
			if err != nil {
				t.Fatal(err)
			}
			for n, r := range res {
				want := 1
				switch n % 10 {
				case 1:
					want = 0
				case 2:
					want = 3
				}
				if len(r.Outputs) != want {
					t.Fatalf("n=%d: %d outputs, want %d", n, len(r.Outputs), want)
				}
				var tags []string
				switch n % 5 {
				case 0:
					tags = []string{"fallback"}
				case 1:
					tags = []string{"onsuccess"}
				case 3:
					tags = []string{"sink"}
				}
				for k, o := range r.Outputs {
					v := fmt.Sprintf("%d:xxxx", n)
					if want == 3 {
						v += fmt.Sprintf("#%d", k)
					}
					if string(o.Value) != v || fmt.Sprint(o.Tags) != fmt.Sprint(tags) || fmt.Sprint(o.Keys) != "[k]" {
						t.Errorf("n=%d output %d: value %q tags %v keys %v, want %q %v [k]", n, k, o.Value, o.Tags, o.Keys, v, tags)
					}
					if !strings.HasPrefix(string(o.Value), fmt.Sprint(n)) {
						t.Errorf("n=%d: value %q does not start with n", n, o.Value)
					}
					if mode == "unary" {
						if o.Metadata == nil || string(o.Metadata.User["example"]["n"]) != fmt.Sprint(n) {
							t.Errorf("n=%d: metadata %+v, want example/n = %d", n, o.Metadata, n)
						}
					}
				}
			}
		})
	}
}
