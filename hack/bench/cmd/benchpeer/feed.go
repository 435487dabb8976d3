package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"time"
)

// feed is what the loaders (kafka-load, js-load) share: the flags saying
// what to fill and how, and the fill-then-follow loop.
type feed struct {
	in, out, del, ready string
	n, size             int
	follow              bool
}

// feedFlags adds the loader flags to fs; what names a topic or a stream.
func feedFlags(fs *flag.FlagSet, what string, n int) *feed {
	f := &feed{}
	fs.StringVar(&f.in, "in", "", "input "+what+" to create and fill")
	fs.StringVar(&f.out, "out", "", "output "+what+" to create")
	fs.StringVar(&f.del, "delete", "", "comma-separated "+what+"s to delete first")
	fs.IntVar(&f.n, "n", n, "messages to produce")
	fs.IntVar(&f.size, "size", 1024, "payload bytes")
	fs.BoolVar(&f.follow, "follow", false, "keep -n messages more in -in than in -out until stopped")
	fs.StringVar(&f.ready, "ready-file", "", "file created once the first -n messages are stored")
	return f
}

// value is the payload of every message.
func (f *feed) value() []byte { return bytes.Repeat([]byte{'x'}, f.size) }

// run produces -n messages, creates the ready file and, with -follow,
// then tops the input up whenever lag (input minus output) falls a
// quarter below -n, until ctx ends. It prints how many it produced.
func (f *feed) run(ctx context.Context, produce func(count int64) error, lag func() (int64, error)) error {
	n := int64(f.n)
	if err := produce(n); err != nil {
		return err
	}
	total := n
	if f.ready != "" {
		if err := os.WriteFile(f.ready, nil, 0o644); err != nil {
			return err
		}
	}
	if !f.follow {
		return printResult(result{Msgs: total})
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return printResult(result{Msgs: total})
		case <-t.C:
		}
		l, err := lag()
		if err != nil {
			continue
		}
		if more := n - l; more > n/4 {
			if err := produce(more); err != nil {
				if ctx.Err() != nil {
					return printResult(result{Msgs: total})
				}
				return err
			}
			total += more
		}
	}
}
