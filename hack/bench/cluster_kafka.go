package main

// The kafka -> kafka example of --cluster: kfake and its input, in the
// cluster for the pod (e2e/cluster/testdata/kafka.yaml, the broker the
// cluster tests use) and as a process here for the processes.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// kafkaInput is how many 1 KiB records each side's input topic holds:
// more than the runner reads before and while it is measured at the rates
// seen here (up to ~920k msgs/s on loopback and ~860k in the pod, which
// reads for 10 s or more before its first /status answers, as Knative
// waits for its readiness probe), so it never runs dry while measured
// (measureRate refuses a window that reached the end of the input).
const kafkaInput = 40_000_000

// kafkaTopics are the example's topics, created by kfake at start.
const kafkaTopics = "orders:6,orders-processed-hpa:6"

// loaderEnv makes the runner a loader: generator -> kafka, kafkaInput
// records of 1 KiB into the example's input topic, then exit.
func loaderEnv(brokers string) []string {
	return []string{
		"MV_NAME=kafka-loader", "MV_SOURCE=generator", "MV_SINK=kafka",
		"MV_GENERATOR_TOTAL=" + strconv.Itoa(kafkaInput), "MV_GENERATOR_RPU=" + strconv.Itoa(min(kafkaInput, 10_000_000)), "MV_GENERATOR_DURATION=1s",
		"MV_GENERATOR_MSG_SIZE=1024", "MV_GENERATOR_FIXED_PAYLOAD=true",
		"MV_KAFKA_BROKERS=" + brokers, "MV_KAFKA_SINK_TOPIC=orders",
	}
}

// kafkaProcsSide starts kfake here, fills its input topic with the runner
// as a loader, and points the example's runner at it.
func kafkaProcsSide(ctx context.Context, c *clusterRun) ([]string, func(), error) {
	kfake := filepath.Join(c.bin, "kfake")
	if _, err := os.Stat(kfake); err != nil {
		if out, err := command(ctx, c.repo, nil, "go", "build", "-o", kfake, "./internal/kafkatest/cmd/kfake").CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("go build kfake: %v\n%s", err, out)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	broker := exec.CommandContext(ctx, kfake, "-ports", strconv.Itoa(port), "-topics", kafkaTopics)
	if err := broker.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() { _ = broker.Process.Signal(syscall.SIGTERM); _ = broker.Wait() }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; ; i++ {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if i == 100 {
			stop()
			return nil, nil, fmt.Errorf("kfake on %s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	admin, err := freePort()
	if err != nil {
		stop()
		return nil, nil, err
	}
	web, err := freePort()
	if err != nil {
		stop()
		return nil, nil, err
	}
	load := exec.CommandContext(ctx, filepath.Join(c.bin, "runner"))
	load.Env = append(append(os.Environ(), loaderEnv(addr)...), fmt.Sprintf("MV_ADMIN_PORT=%d", admin), fmt.Sprintf("PORT=%d", web))
	started := time.Now()
	if out, err := load.CombinedOutput(); err != nil {
		stop()
		return nil, nil, fmt.Errorf("loading %d records into kfake: %v\n%s", kafkaInput, err, tail(string(out), 1500))
	}
	fmt.Printf("         kafka->kafka processes: %d records loaded in %v\n", kafkaInput, time.Since(started).Round(100*time.Millisecond))
	return []string{"MV_KAFKA_BROKERS=" + addr}, stop, nil
}

// kafkaPodSide applies the cluster tests' kfake and fills its input topic
// with a Job that runs the runner as a loader; the stop deletes both, so
// the next round starts on an empty broker.
func kafkaPodSide(ctx context.Context, c *clusterRun) (func(), error) {
	const broker = "e2e/cluster/testdata/kafka.yaml"
	stop := func() {
		_ = command(context.Background(), c.repo, c.env, "kubectl", "delete", "-f", broker, "--wait=true", "--timeout=120s").Run()
	}
	if out, err := command(ctx, c.repo, c.env, "ko", "apply", "-f", broker).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ko apply -f %s: %v\n%s", broker, err, out)
	}
	// The tests' kfake asks for no CPU, so in the pod layout it would be
	// BestEffort: 2 CPU shares against the runner pod's ~280, run only
	// when the runner's pod leaves a core idle. As a process here it
	// weighs as much as the runner; give it the runner's request so the
	// two compare like with like.
	if c.runnerCPU == "" {
		stop()
		return nil, fmt.Errorf("the example's runner container requests no CPU to give kfake")
	}
	if out, err := command(ctx, c.repo, c.env, "kubectl", "set", "resources", "deploy/kafka", "--requests=cpu="+c.runnerCPU).CombinedOutput(); err != nil {
		stop()
		return nil, fmt.Errorf("kubectl set resources deploy/kafka: %v\n%s", err, out)
	}
	if out, err := command(ctx, c.repo, c.env, "kubectl", "rollout", "status", "deploy/kafka", "--timeout=180s").CombinedOutput(); err != nil {
		stop()
		return nil, fmt.Errorf("kfake in the cluster: %v\n%s", err, out)
	}
	job := "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: kafka-loader\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: runner\n          image: ko://github.com/monovertex/monovertex/cmd/runner\n          env:\n"
	for _, kv := range loaderEnv("kafka:9092") {
		k, v, _ := strings.Cut(kv, "=")
		job += fmt.Sprintf("            - {name: %s, value: %q}\n", k, v)
	}
	f, err := os.CreateTemp("", "kafka-loader-*.yaml")
	if err != nil {
		stop()
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(job); err != nil {
		stop()
		return nil, err
	}
	f.Close()
	started := time.Now()
	if out, err := command(ctx, c.repo, c.env, "ko", "apply", "-f", f.Name()).CombinedOutput(); err != nil {
		stop()
		return nil, fmt.Errorf("ko apply the loader Job: %v\n%s", err, out)
	}
	out, err := command(ctx, c.repo, c.env, "kubectl", "wait", "--for=condition=complete", "--timeout=600s", "job/kafka-loader").CombinedOutput()
	_ = command(context.Background(), c.repo, c.env, "kubectl", "delete", "job", "kafka-loader", "--wait=true", "--cascade=foreground", "--timeout=120s").Run()
	if err != nil {
		stop()
		return nil, fmt.Errorf("the loader Job did not complete: %v\n%s", err, out)
	}
	fmt.Printf("         kafka->kafka pod: %d records loaded in %v\n", kafkaInput, time.Since(started).Round(100*time.Millisecond))
	return stop, nil
}
