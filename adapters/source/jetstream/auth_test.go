package jetstream_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/monovertex/monovertex/adapters/internal/adaptertest"
	jssource "github.com/monovertex/monovertex/adapters/source/jetstream"
	"github.com/monovertex/monovertex/internal/natsjs"
	"github.com/monovertex/monovertex/internal/natstest"
	"github.com/monovertex/monovertex/internal/peerauth"
	"github.com/monovertex/monovertex/runner"
)

// TestConformanceOverMutualTLSWithAnNKey runs the whole source suite
// against a server that speaks only TLS, wants a client certificate its CA
// signed and an NKey signature, as a Numaflow source with tls and
// auth.nkey reads one; the server restarts keep the same security.
func TestConformanceOverMutualTLSWithAnNKey(t *testing.T) {
	sec := natstest.WriteSecrets(t)
	srv := natstest.StartWith(t, natstest.TLS(t, sec.PKI, true), natstest.NKeyUser(t, sec.Seed))
	runConformance(t, srv, func(c *jssource.Config) { c.Auth = sec.Auth() })
}

// TestASecuredServerRefusesWhatItShould: each part of the security is
// needed, and the error says which.
func TestASecuredServerRefusesWhatItShould(t *testing.T) {
	sec := natstest.WriteSecrets(t)
	srv := natstest.StartWith(t, natstest.TLS(t, sec.PKI, true), natstest.NKeyUser(t, sec.Seed))
	_, js := srv.Connect(t)
	createStream(t, js, "S")
	other := natstest.WriteSecrets(t) // another CA and another user
	for _, c := range []struct {
		name   string
		change func(*natsjs.Auth)
		want   string
	}{
		{"no client certificate", func(a *natsjs.Auth) { a.TLSCertFile, a.TLSKeyFile = "", "" }, "tls"},
		{"another CA", func(a *natsjs.Auth) { a.TLSCAFile = other.CA }, "certificate"},
		{"no CA: the system roots do not know the test CA", func(a *natsjs.Auth) { a.TLSCAFile = "" }, "certificate"},
		{"no TLS settings: nats.go upgrades to the TLS the server wants, and cannot verify it", func(a *natsjs.Auth) { *a = natsjs.Auth{NKeyFile: a.NKeyFile} }, "certificate"},
		{"no NKey", func(a *natsjs.Auth) { a.NKeyFile = "" }, "authorization"},
		{"another user's NKey", func(a *natsjs.Auth) { a.NKeyFile = other.NKey }, "authorization"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(srv.URL(), "S")
			cfg.Auth = sec.Auth()
			c.change(&cfg.Auth)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			src, err := connect(ctx, cfg, t.Name(), nil)
			if err == nil {
				src.Close(context.Background())
				t.Fatal("connected")
			}
			t.Logf("refused: %v", err)
			if !strings.Contains(strings.ToLower(err.Error()), c.want) {
				t.Fatalf("error %v, want one about %s", err, c.want)
			}
		})
	}

	t.Run("TLS asked for, against a server without it", func(t *testing.T) {
		plain := natstest.Start(t)
		cfg := testConfig(plain.URL(), "S")
		cfg.Auth = natsjs.Auth{TLSFiles: peerauth.TLSFiles{TLS: true}}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := connect(ctx, cfg, t.Name(), nil)
		t.Logf("refused: %v", err)
		if err == nil || !strings.Contains(err.Error(), "the server does not offer it") {
			t.Fatalf("error %v, want one saying the server offers no TLS", err)
		}
	})

	t.Run("a seed with white space around it, as a Secret may hold it", func(t *testing.T) {
		padded := filepath.Join(sec.Dir, "padded.nk")
		if err := os.WriteFile(padded, append(append([]byte("  \n"), sec.Seed...), " \r\n\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
		want := publish(t, js, "S.in", 5, "padded")
		cfg := testConfig(srv.URL(), "S")
		cfg.Auth = sec.Auth()
		cfg.NKeyFile = padded
		if err := cfg.Validate(runner.RoleSource); err != nil {
			t.Fatal(err)
		}
		readAllOnce(t, newSource(t, cfg), want)
	})

	t.Run("skip verify without a CA, against a server that wants no client certificate", func(t *testing.T) {
		srv := natstest.StartWith(t, natstest.TLS(t, sec.PKI, false))
		_, js := srv.Connect(t)
		createStream(t, js, "T")
		want := publish(t, js, "T.in", 20, "skip")
		cfg := testConfig(srv.URL(), "T")
		cfg.Auth = natsjs.Auth{TLSFiles: peerauth.TLSFiles{TLSSkipVerify: true}}
		readAllOnce(t, newSource(t, cfg), want)
	})
}

// readAllOnce reads len(want) messages from src within 30 s, acks them,
// and checks they are want in order.
func readAllOnce(t *testing.T, src *jssource.Source, want [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := adaptertest.ReadN(t, ctx, src, len(want), false)
	if err := src.Ack(ctx, got); err != nil {
		t.Fatal(err)
	}
	for i, m := range got {
		if string(m.Value) != string(want[i]) {
			t.Fatalf("message %d: %q, want %q", i, m.Value, want[i])
		}
	}
}

func TestValidateAuth(t *testing.T) {
	sec := natstest.WriteSecrets(t)
	good := testConfig("nats://127.0.0.1:4222", "S")
	good.Auth = sec.Auth()
	notPEM := filepath.Join(sec.Dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	account, _ := nkeys.CreateAccount()
	accountSeed, _ := account.Seed()
	accountFile := filepath.Join(sec.Dir, "account.nk")
	if err := os.WriteFile(accountFile, accountSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*jssource.Config)
		bad    string
	}{
		{"valid", func(*jssource.Config) {}, ""},
		{"skip verify alone", func(c *jssource.Config) { c.Auth = natsjs.Auth{TLSFiles: peerauth.TLSFiles{TLSSkipVerify: true}} }, ""},
		{"cert without key", func(c *jssource.Config) { c.TLSKeyFile = "" }, "MV_JETSTREAM_TLS_KEY_FILE"},
		{"key without cert", func(c *jssource.Config) { c.TLSCertFile = "" }, "MV_JETSTREAM_TLS_CERT_FILE"},
		{"missing CA file", func(c *jssource.Config) { c.TLSCAFile = filepath.Join(sec.Dir, "nope") }, "MV_JETSTREAM_TLS_CA_FILE"},
		{"CA file not PEM", func(c *jssource.Config) { c.TLSCAFile = notPEM }, "MV_JETSTREAM_TLS_CA_FILE"},
		{"key not matching", func(c *jssource.Config) { c.TLSKeyFile = natstest.WriteSecrets(t).Key }, "MV_JETSTREAM_TLS_CERT_FILE"},
		{"missing nkey file", func(c *jssource.Config) { c.NKeyFile = filepath.Join(sec.Dir, "nope") }, "MV_JETSTREAM_NKEY_FILE"},
		{"nkey file not a seed", func(c *jssource.Config) { c.NKeyFile = notPEM }, "MV_JETSTREAM_NKEY_FILE"},
		{"an account's seed", func(c *jssource.Config) { c.NKeyFile = accountFile }, "MV_JETSTREAM_NKEY_FILE"},
		{"nkey and a creds file", func(c *jssource.Config) { c.Creds = "/x.creds" }, "MV_JETSTREAM_CREDS"},
		{"nkey and a user in the URL, which nats.go would send instead", func(c *jssource.Config) { c.URL = "nats://u:p@127.0.0.1:4222" }, "MV_JETSTREAM_NKEY_FILE"},
		{"a creds file and a user in the URL", func(c *jssource.Config) { c.NKeyFile, c.Creds, c.URL = "", "/x.creds", "nats://u:p@127.0.0.1:4222" }, "MV_JETSTREAM_CREDS"},
		{"a blank user and a creds file", func(c *jssource.Config) { c.NKeyFile, c.User, c.Password, c.Creds = "", " ", "p", "/x.creds" }, "MV_JETSTREAM_USER"},
		{"a user and password", func(c *jssource.Config) { c.NKeyFile, c.User, c.Password = "", "u", "p" }, ""},
		{"a token", func(c *jssource.Config) { c.NKeyFile, c.Token = "", "t" }, ""},
		{"a user without a password", func(c *jssource.Config) { c.NKeyFile, c.User = "", "u" }, "MV_JETSTREAM_PASSWORD"},
		{"a password that is only white space", func(c *jssource.Config) { c.NKeyFile, c.User, c.Password = "", "u", " \n" }, "MV_JETSTREAM_PASSWORD"},
		{"a password without a user", func(c *jssource.Config) { c.NKeyFile, c.Password = "", "p" }, "MV_JETSTREAM_USER"},
		{"a user that is only white space", func(c *jssource.Config) { c.NKeyFile, c.User, c.Password = "", "\n", "p" }, "MV_JETSTREAM_USER"},
		{"a token that is only white space", func(c *jssource.Config) { c.NKeyFile, c.Token = "", "\r\n" }, "MV_JETSTREAM_TOKEN"},
		{"a user and a token", func(c *jssource.Config) { c.NKeyFile, c.User, c.Password, c.Token = "", "u", "p", "t" }, "MV_JETSTREAM_TOKEN"},
		{"an nkey and a user", func(c *jssource.Config) { c.User, c.Password = "u", "p" }, "MV_JETSTREAM_NKEY_FILE"},
		{"an nkey and a token", func(c *jssource.Config) { c.Token = "t" }, "MV_JETSTREAM_NKEY_FILE"},
		{"a user and a creds file", func(c *jssource.Config) { c.NKeyFile, c.User, c.Password, c.Creds = "", "u", "p", "/x.creds" }, "MV_JETSTREAM_CREDS"},
		{"a user here and in the URL", func(c *jssource.Config) {
			c.NKeyFile, c.User, c.Password, c.URL = "", "u", "p", "nats://a:b@127.0.0.1:4222"
		}, "MV_JETSTREAM_USER"},
		{"a token here and in the second URL", func(c *jssource.Config) {
			c.NKeyFile, c.Token, c.URL = "", "t", "nats://127.0.0.1:4222, t2@127.0.0.1:4223"
		}, "MV_JETSTREAM_TOKEN"},
	} {
		adaptertest.ValidateRow(t, tc.name, good, runner.RoleSource, tc.change, tc.bad)
	}
}

// TestUserPasswordAndTokenAsNumaflowReadsThem: MV_JETSTREAM_USER and
// _PASSWORD, and MV_JETSTREAM_TOKEN, as mvctl sets them from Numaflow's
// auth.basic and auth.token Secrets: with the line break a Secret made
// from a file ends in (trimmed, as numaflow-core trims it) and with
// characters a URL would have to escape. Every message is read and acked;
// a wrong password is refused with a hint naming the variables.
func TestUserPasswordAndTokenAsNumaflowReadsThem(t *testing.T) {
	const user, password, token = "orders", "p@ss:w/rd %20?#", "tok/en@:x"
	for _, c := range []struct {
		name  string
		srv   natstest.Option
		set   func(*natsjs.Auth)
		wrong func(*natsjs.Auth)
	}{
		{"basic", natstest.User(user, password),
			func(a *natsjs.Auth) { a.User, a.Password = " "+user+"\n", password+"\r\n" },
			func(a *natsjs.Auth) { a.User, a.Password = user, "other" }},
		{"token", natstest.Token(token),
			func(a *natsjs.Auth) { a.Token = token + "\n" },
			func(a *natsjs.Auth) { a.Token = "other" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := natstest.StartWith(t, c.srv)
			_, js := srv.Connect(t)
			createStream(t, js, "S")
			want := publish(t, js, "S.in", 20, c.name)
			cfg := testConfig(srv.URL(), "S")
			c.set(&cfg.Auth)
			if err := cfg.Validate(runner.RoleSource); err != nil {
				t.Fatal(err)
			}
			readAllOnce(t, newSource(t, cfg), want)

			bad := testConfig(srv.URL(), "S")
			c.wrong(&bad.Auth)
			ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel2()
			s, err := connect(ctx2, bad, t.Name(), nil)
			if err == nil {
				s.Close(context.Background())
				t.Fatal("connected with the wrong secret")
			}
			t.Logf("refused: %v", err)
			if !strings.Contains(err.Error(), "MV_JETSTREAM_USER and MV_JETSTREAM_PASSWORD, MV_JETSTREAM_TOKEN") {
				t.Fatalf("error %v, want a hint naming the variables", err)
			}
		})
	}
}
