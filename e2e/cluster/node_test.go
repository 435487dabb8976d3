package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// nodeNetns is the path of the node's network namespace, from the env
// file's MONOVERTEX_CLUSTER_NSENTER ("nsenter --net=PATH --").
func (c *cluster) nodeNetns() string {
	c.t.Helper()
	for _, f := range strings.Fields(c.getenv("MONOVERTEX_CLUSTER_NSENTER")) {
		if p, ok := strings.CutPrefix(f, "--net="); ok {
			return p
		}
	}
	c.t.Fatal("MONOVERTEX_CLUSTER_NSENTER names no --net= namespace")
	return ""
}

// nodeDialer returns a dial function that connects from inside the node's
// network namespace, where Service IPs answer, with hosts renamed by
// hosts (a Service's name to its ClusterIP): the test reaches a broker
// in the cluster as its pods do, at the address the broker advertises.
func (c *cluster) nodeDialer(hosts map[string]string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	netns := c.nodeNetns()
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if ip, ok := hosts[host]; ok {
			addr = net.JoinHostPort(ip, port)
		}
		type result struct {
			conn net.Conn
			err  error
		}
		ch := make(chan result, 1)
		go func() {
			// The socket is made in the namespace of the thread that makes
			// it. This thread is never unlocked, so it ends with the
			// goroutine and no other goroutine runs in the node's namespace.
			runtime.LockOSThread()
			f, err := os.Open(netns)
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, fmt.Errorf("setns %s: %w", netns, err)}
				return
			}
			d := net.Dialer{Timeout: 10 * time.Second}
			conn, err := d.DialContext(ctx, network, addr)
			ch <- result{conn, err}
		}()
		r := <-ch
		return r.conn, r.err
	}
}

// clusterIP returns a Service's ClusterIP.
func (c *cluster) clusterIP(ns, svc string) string {
	c.t.Helper()
	return strings.TrimSpace(c.run(30*time.Second, "kubectl", "-n", ns, "get", "svc", svc, "-o", "jsonpath={.spec.clusterIP}"))
}
