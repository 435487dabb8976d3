// Command kfake runs franz-go's kfake, an in-memory Kafka cluster that
// speaks the real protocol, as its own process on 127.0.0.1, so tests can
// treat the broker as a separate process: kill it, restart it on the same
// ports with the same data directory, and find the topics, records and
// committed offsets still there.
//
//	kfake -ports 0,0,0 -topics in:6,out:6 -data-dir /tmp/k
//
// It prints one "addr host:port" line per broker, then "ready". SIGTERM or
// SIGINT closes the cluster, which writes its state to -data-dir.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	ports := flag.String("ports", "0", "comma-separated broker ports on 127.0.0.1 (0 picks a free one); one broker per entry")
	topics := flag.String("topics", "", "topics to create if missing, name:partitions,...")
	dataDir := flag.String("data-dir", "", "directory the cluster's state is kept in across restarts (empty: memory only)")
	syncWrites := flag.Bool("sync", false, "fsync every produced batch")
	minSession := flag.Duration("min-session-timeout", time.Second, "smallest group session timeout the brokers accept")
	retention := flag.Duration("retention-every", 0, "apply the topics' retention.bytes and retention.ms this often (0: never; kfake keeps every record otherwise)")
	flag.Parse()

	var portList []int
	for _, p := range strings.Split(*ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 65535 {
			fmt.Fprintf(os.Stderr, "kfake: invalid -ports entry %q\n", p)
			os.Exit(2)
		}
		portList = append(portList, n)
	}
	opts := []kfake.Opt{
		kfake.Ports(portList...),
		kfake.NumBrokers(len(portList)),
		kfake.GroupMinSessionTimeout(*minSession),
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	if *syncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake: %v\n", err)
		os.Exit(1)
	}
	if *topics != "" {
		for _, t := range strings.Split(*topics, ",") {
			name, parts, ok := strings.Cut(t, ":")
			n, err := strconv.Atoi(parts)
			if !ok || err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "kfake: invalid -topics entry %q, want name:partitions\n", t)
				c.Close()
				os.Exit(2)
			}
			if c.TopicInfo(name) != nil {
				continue // kept from the data directory
			}
			if err := c.CreateTopic(name, int32(n), nil); err != nil {
				fmt.Fprintf(os.Stderr, "kfake: create topic %s: %v\n", name, err)
				c.Close()
				os.Exit(1)
			}
		}
	}
	for _, a := range c.ListenAddrs() {
		fmt.Println("addr", a)
	}
	fmt.Println("ready")
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if *retention > 0 {
		t := time.NewTicker(*retention)
		defer t.Stop()
		for loop := true; loop; {
			select {
			case <-t.C:
				c.ApplyRetention()
			case <-sigs:
				loop = false
			}
		}
	} else {
		<-sigs
	}
	c.Close()
}
