// Command kfake runs franz-go's kfake, an in-memory Kafka cluster that
// speaks the real protocol, as its own process on 127.0.0.1, so tests can
// treat the broker as a separate process: kill it, restart it on the same
// ports with the same data directory, and find the topics, records and
// committed offsets still there.
//
//	kfake -ports 0,0,0 -topics in:6,out:6 -data-dir /tmp/k
//
// With -tls-cert/-tls-key the brokers speak only TLS (and with
// -tls-client-ca they require a client certificate signed by it); with
// -sasl MECHANISM:USER:PASSWORD they require SASL as that one user, so a
// manifest's TLS and SCRAM settings can be run against it as written; with
// -oauthbearer TOKEN,... they require SASL OAUTHBEARER with one of the
// tokens (a gate in front of kfake answers the SASL exchange).
//
// It prints one "addr host:port" line per broker, then "ready". SIGTERM or
// SIGINT closes the cluster, which writes its state to -data-dir.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// options are the command's flags.
type options struct {
	ports, topics, dataDir       *string
	syncWrites                   *bool
	minSession, retention        *time.Duration
	tlsCert, tlsKey, tlsClientCA *string
	saslUser, oauthTokens        *string
	listenHost, advertise        *string
}

func parseFlags() options {
	o := options{
		ports:       flag.String("ports", "0", "comma-separated broker ports on 127.0.0.1 (0 picks a free one); one broker per entry"),
		topics:      flag.String("topics", "", "topics to create if missing, name:partitions,..."),
		dataDir:     flag.String("data-dir", "", "directory the cluster's state is kept in across restarts (empty: memory only)"),
		syncWrites:  flag.Bool("sync", false, "fsync every produced batch"),
		minSession:  flag.Duration("min-session-timeout", time.Second, "smallest group session timeout the brokers accept"),
		retention:   flag.Duration("retention-every", 0, "apply the topics' retention.bytes and retention.ms this often (0: never; kfake keeps every record otherwise)"),
		tlsCert:     flag.String("tls-cert", "", "PEM server certificate: listen with TLS only (with -tls-key)"),
		tlsKey:      flag.String("tls-key", "", "PEM private key of -tls-cert"),
		tlsClientCA: flag.String("tls-client-ca", "", "PEM CA: require a client certificate signed by it"),
		saslUser:    flag.String("sasl", "", "MECHANISM:USER:PASSWORD (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512): require SASL as this user"),
		oauthTokens: flag.String("oauthbearer", "", "comma-separated tokens: require SASL OAUTHBEARER with one of them (not with -tls-cert or -sasl)"),
		listenHost:  flag.String("listen-host", "127.0.0.1", "address the brokers listen on (0.0.0.0 in a pod)"),
		advertise:   flag.String("advertise", "", "host the brokers name in metadata, where clients connect (default: the listen address; in a pod, its Service's name)"),
	}
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	c, err := kfake.NewCluster(o.cluster()...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake: %v\n", err)
		os.Exit(1)
	}
	if *o.topics != "" {
		createTopics(c, *o.topics)
	}
	for _, a := range c.ListenAddrs() {
		fmt.Println("addr", a)
	}
	fmt.Println("ready")
	serveUntilSignal(c, *o.retention)
	c.Close()
}

// cluster is the kfake options the flags ask for; a flag it cannot take
// exits 2.
func (o options) cluster() []kfake.Opt {
	// listen is where every broker listens; kfake asks for 127.0.0.1:port.
	listen := func(network, address string) (net.Listener, error) {
		_, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen(network, net.JoinHostPort(*o.listenHost, port))
		if err != nil || *o.advertise == "" {
			return ln, err
		}
		_, port, _ = net.SplitHostPort(ln.Addr().String())
		return advertised{Listener: ln, addr: hostPort(net.JoinHostPort(*o.advertise, port))}, nil
	}

	var portList []int
	for _, p := range strings.Split(*o.ports, ",") {
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
		kfake.GroupMinSessionTimeout(*o.minSession),
	}
	if *o.tlsCert != "" {
		cfg, err := serverTLS(*o.tlsCert, *o.tlsKey, *o.tlsClientCA)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kfake: %v\n", err)
			os.Exit(2)
		}
		opts = append(opts, kfake.TLS(cfg))
	}
	if *o.saslUser != "" {
		parts := strings.SplitN(*o.saslUser, ":", 3)
		if len(parts) != 3 {
			fmt.Fprintf(os.Stderr, "kfake: invalid -sasl %q, want MECHANISM:USER:PASSWORD\n", *o.saslUser)
			os.Exit(2)
		}
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(parts[0], parts[1], parts[2]))
	}
	if *o.oauthTokens != "" {
		if *o.tlsCert != "" || *o.saslUser != "" {
			fmt.Fprintln(os.Stderr, "kfake: -oauthbearer cannot be combined with -tls-cert or -sasl")
			os.Exit(2)
		}
		tokens := map[string]bool{}
		for _, t := range strings.Split(*o.oauthTokens, ",") {
			tokens[t] = true
		}
		opts = append(opts, kfake.ListenFn(func(network, address string) (net.Listener, error) {
			ln, err := listen(network, address)
			if err != nil {
				return nil, err
			}
			return &oauthListener{Listener: ln, tokens: tokens}, nil
		}))
	} else {
		opts = append(opts, kfake.ListenFn(listen))
	}
	if *o.dataDir != "" {
		opts = append(opts, kfake.DataDir(*o.dataDir))
	}
	if *o.syncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	return opts
}

// createTopics creates the topics of -topics that the data directory did
// not keep; a bad entry exits 2, a failed creation 1.
func createTopics(c *kfake.Cluster, topics string) {
	for _, t := range strings.Split(topics, ",") {
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

// serveUntilSignal returns at SIGTERM or SIGINT, applying the topics'
// retention every retention meanwhile (0: never).
func serveUntilSignal(c *kfake.Cluster, retention time.Duration) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if retention <= 0 {
		<-sigs
		return
	}
	t := time.NewTicker(retention)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.ApplyRetention()
		case <-sigs:
			return
		}
	}
}

// serverTLS is the brokers' TLS configuration from PEM files.
func serverTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-client-ca %s holds no PEM certificate", clientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// advertised is a listener whose address, which kfake puts in metadata as
// the broker's host and port, is the one clients should connect to.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (l advertised) Addr() net.Addr { return l.addr }

// hostPort is a TCP address given by name.
type hostPort string

func (h hostPort) Network() string { return "tcp" }
func (h hostPort) String() string  { return string(h) }
