// Command benchpeer holds the programs the benchmark runs beside the runner:
// Numaflow SDK servers that produce and consume as fast as they are asked,
// an sdk-go CloudEvents function, a bare HTTP server, and the baselines
// (two bare gRPC clients, concurrent and sequential, a bare CloudEvents
// client, a Unix-socket byte pump).
// Each is a subcommand, so the harness builds one binary and runs each part
// as its own process, as it would run in a pod.
//
// The baselines print one JSON line on stdout when they finish:
// {"msgs":N,"bytes":B,"seconds":S} counted over the measured window only.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"syscall"
	"time"

	"github.com/monovertex/monovertex/hack/bench/internal/wait"
)

// command is one subcommand: it parses its flags from args and runs until
// ctx ends (servers) or its measurement is done (baselines).
type command struct {
	help string
	run  func(ctx context.Context, args []string) error
}

var commands = map[string]command{
	"udsource":        {"Numaflow SDK source that returns every read in full at once", runUDSource},
	"udsink":          {"Numaflow SDK sink that accepts every message", runUDSink},
	"udtransformer":   {"Numaflow SDK source transformer that returns each message unchanged", runUDTransformer},
	"grpc-baseline":   {"concurrent bare gRPC client: one sink (and transformer) stream per in-flight batch, batches overlapped", runGRPCBaseline},
	"grpc-sequential": {"sequential bare gRPC client: one stream per container, one batch at a time (Numaflow's contract)", runGRPCSequential},
	"function":        {"sdk-go CloudEvents function on loopback that answers with the event it got", runFunction},
	"ce-baseline":     {"bare sdk-go CloudEvents client posting events at a fixed concurrency", runCEBaseline},
	"http-server":     {"bare net/http server that reads each POST body and answers 200", runHTTPServer},
	"pump":            {"raw Unix-socket byte pump: one writer, one reader, fixed-size chunks", runPump},
	"kafka-load":      {"create Kafka topics and fill the input with fixed-size records", runKafkaLoad},
	"kafka-baseline":  {"bare franz-go loop: poll a batch, produce it, wait for the acks, commit, repeat", runKafkaBaseline},
	"nats-server":     {"nats-server with JetStream on 127.0.0.1, max_payload 8 MiB", runNATSServer},
	"js-load":         {"create JetStream streams and fill the input with fixed-size messages", runJSLoad},
	"js-baseline":     {"bare nats.go loop: fetch a batch, publish it, wait for the publish acks, ack, repeat", runJSBaseline},
}

func main() {
	if len(os.Args) < 2 || commands[os.Args[1]].run == nil {
		usage()
		os.Exit(2)
	}
	cmd := commands[os.Args[1]]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if p := os.Getenv("BENCH_CPUPROFILE"); p != "" {
		// A whole-life CPU profile, so a baseline or peer can be compared
		// with the runner's profile of the same scenario.
		f, err := os.Create(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchpeer: BENCH_CPUPROFILE: %v\n", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "benchpeer: start CPU profile: %v\n", err)
			os.Exit(1)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "benchpeer %s: %v\n", os.Args[1], err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: benchpeer <command> [flags]; commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-16s %s\n", n, commands[n].help)
	}
}

// result is what a baseline prints: counts over the measured window.
type result struct {
	Msgs    int64   `json:"msgs"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	Errors  int64   `json:"errors,omitempty"`
	// CPUSeconds is the process' user+system CPU time in the window.
	CPUSeconds float64 `json:"cpu_seconds"`
}

func printResult(r result) error {
	return json.NewEncoder(os.Stdout).Encode(r)
}

// window is the measured window of a baseline: -warmup, then -duration.
type window struct{ warmup, duration time.Duration }

// measureFlags returns the flag set of a measuring subcommand, with the
// -warmup and -duration of its window.
func measureFlags(name string) (*flag.FlagSet, *window) {
	fs := newFlags(name)
	w := &window{}
	fs.DurationVar(&w.warmup, "warmup", 2*time.Second, "time before counting")
	fs.DurationVar(&w.duration, "duration", 10*time.Second, "measured time")
	return fs, w
}

// measure waits for the warm-up, samples count, waits for the measured
// duration and samples again. It returns early with an error if ctx ends.
func (w *window) measure(ctx context.Context, sample func() (msgs, bytes int64)) (result, error) {
	if !wait.Sleep(ctx, w.warmup) {
		return result{}, fmt.Errorf("stopped during warm-up: %w", ctx.Err())
	}
	m0, b0 := sample()
	c0 := cpuSeconds()
	t0 := time.Now()
	if !wait.Sleep(ctx, w.duration) {
		return result{}, fmt.Errorf("stopped during measurement: %w", ctx.Err())
	}
	m1, b1 := sample()
	return result{Msgs: m1 - m0, Bytes: b1 - b0, Seconds: time.Since(t0).Seconds(), CPUSeconds: cpuSeconds() - c0}, nil
}

// cpuSeconds is the user and system CPU time this process used so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// report measures the window and prints its result. The work fails by
// cancelling ctx with a cause, which is then the error.
func (w *window) report(ctx context.Context, sample func() (msgs, bytes int64)) error {
	res, err := w.measure(ctx, sample)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return err
	}
	return printResult(res)
}

// listenFlag parses the one flag of a server subcommand, -addr (def when
// not given), and listens on it.
func listenFlag(name, def string, args []string) (net.Listener, error) {
	fs := newFlags(name)
	addr := fs.String("addr", def, "listen address")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", *addr, err)
	}
	return ln, nil
}

// newFlags returns the flag set of a subcommand.
func newFlags(name string) *flag.FlagSet {
	return flag.NewFlagSet("benchpeer "+name, flag.ContinueOnError)
}
