package mvconvert

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"

	nf "github.com/monovertex/monovertex/internal/apis/numaflow/v1alpha1"
	"github.com/monovertex/monovertex/internal/kafkaconn"
	"github.com/monovertex/monovertex/internal/natsjs"
)

// kafkaAuthSpec is the one TLS/SASL setting every Kafka part shares.
type kafkaAuthSpec struct {
	path string
	tls  *nf.TLS
	sasl *nf.SASL
}

// mountSecret mounts the key sel names as dir/file from a volume vol and
// returns the file's path.
func (c *converter) mountSecret(vol, dir, file string, sel *corev1.SecretKeySelector, from string) string {
	if sel.Name == "" || sel.Key == "" {
		c.fail(from, "want a secret reference with name and key")
	}
	c.volumes = append(c.volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: sel.Name, Items: []corev1.KeyToPath{{Key: sel.Key, Path: file}},
	}}})
	c.mounts = append(c.mounts, corev1.VolumeMount{Name: vol, MountPath: dir, ReadOnly: true})
	return dir + "/" + file
}

// natsVars names one NATS source's variables and where its Secrets go.
type natsVars struct {
	prefix string // MV_JETSTREAM or MV_NATS
	volume string // prefix of the Secret volumes' names
	dir    string // where they are mounted
}

var (
	natsJetStream = natsVars{"MV_JETSTREAM", "jetstream", jetstreamDir}
	natsCore      = natsVars{"MV_NATS", "nats", natsDir}
)

// natsAuth maps a NATS source's auth as numaflow-core's parse_nats_auth
// reads it: basic, else nkey, else token; an empty auth refused. The
// runner trims the Secrets' values as numaflow-core does.
func (c *converter) natsAuth(p string, a *nf.NatsAuth, url string, v natsVars) {
	if a == nil {
		return
	}
	if natsjs.URLsCarryUser(url) {
		c.fail(p+".url", "carries a user or token and auth is set too: keep one (the runner refuses both)")
	}
	ignored := func(field string) {
		c.warn(p+".auth."+field, "ignored: Numaflow uses only the first of basic, nkey and token that is set")
	}
	switch {
	case a.Basic != nil:
		c.setSecretEnv(v.prefix+"_USER", a.Basic.User, p+".auth.basic.user")
		c.setSecretEnv(v.prefix+"_PASSWORD", a.Basic.Password, p+".auth.basic.password")
		if a.NKey != nil {
			ignored("nkey")
		}
		if a.Token != nil {
			ignored("token")
		}
	case a.NKey != nil:
		fp := p + ".auth.nkey"
		c.setEnv(v.prefix+"_NKEY_FILE", c.mountSecret(v.volume+"-nkey", v.dir+"/nkey", "seed.nk", a.NKey, fp), fp)
		if a.Token != nil {
			ignored("token")
		}
	case a.Token != nil:
		c.setSecretEnv(v.prefix+"_TOKEN", a.Token, p+".auth.token")
	default:
		c.fail(p+".auth", "is set but names no basic, nkey or token (Numaflow refuses it so)")
	}
}

// natsTLS sets a NATS source's _TLS* variables, as numaflow-core reads its
// tls: insecureSkipVerify alone ignores the Secrets, a client certificate
// needs its key.
func (c *converter) natsTLS(p string, tls *nf.TLS, v natsVars) {
	c.setEnv(v.prefix+"_TLS", "true", p)
	if tls.InsecureSkipVerify {
		c.setEnv(v.prefix+"_TLS_SKIP_VERIFY", "true", p+".insecureSkipVerify")
		if tls.CACertSecret != nil || tls.CertSecret != nil || tls.KeySecret != nil {
			c.warn(p+".insecureSkipVerify", "the CA and client certificate Secrets are ignored with it, as Numaflow ignores them")
		}
		return
	}
	if tls.CertSecret != nil && tls.KeySecret == nil {
		c.fail(p+".keySecret", "required with certSecret (Numaflow refuses a client certificate without its key)")
	}
	for _, f := range []struct {
		sel         *corev1.SecretKeySelector
		field, name string
		env         string
	}{
		{tls.CACertSecret, "caCertSecret", "ca", "_TLS_CA_FILE"},
		{tls.CertSecret, "certSecret", "cert", "_TLS_CERT_FILE"},
		{tls.KeySecret, "keySecret", "key", "_TLS_KEY_FILE"},
	} {
		if f.sel == nil || f.name == "key" && tls.CertSecret == nil {
			continue // Numaflow reads a key only with a certificate
		}
		fp := p + "." + f.field
		c.setEnv(v.prefix+f.env, c.mountSecret(v.volume+"-tls-"+f.name, v.dir+"/tls-"+f.name, f.name+".pem", f.sel, fp), fp)
	}
}

// kafkaAuth sets the Kafka TLS and SASL variables, which every Kafka part
// of the runner shares: a second, different setting is refused.
func (c *converter) kafkaAuth(p string, tls *nf.TLS, sasl *nf.SASL) {
	if c.kafkaShared != nil {
		if !reflect.DeepEqual(c.kafkaShared.tls, tls) || !reflect.DeepEqual(c.kafkaShared.sasl, sasl) {
			c.fail(p, "TLS or SASL settings differ from %s's: the runner's Kafka parts share one set (MV_KAFKA_TLS*, MV_KAFKA_SASL_*)", c.kafkaShared.path)
		}
		return
	}
	c.kafkaShared = &kafkaAuthSpec{path: p, tls: tls, sasl: sasl}
	if tls != nil {
		c.setEnv("MV_KAFKA_TLS", "true", p+".tls")
		if tls.InsecureSkipVerify {
			c.setEnv("MV_KAFKA_TLS_SKIP_VERIFY", "true", p+".tls.insecureSkipVerify")
		}
		for _, f := range []struct {
			sel       *corev1.SecretKeySelector
			field     string
			name, env string
		}{
			{tls.CACertSecret, "caCertSecret", "ca", "MV_KAFKA_TLS_CA_FILE"},
			{tls.CertSecret, "certSecret", "cert", "MV_KAFKA_TLS_CERT_FILE"},
			{tls.KeySecret, "keySecret", "key", "MV_KAFKA_TLS_KEY_FILE"},
		} {
			if f.sel == nil {
				continue
			}
			fp := p + ".tls." + f.field
			c.setEnv(f.env, c.mountSecret("kafka-tls-"+f.name, kafkaTLSDir+"/"+f.name, f.name+".pem", f.sel, fp), fp)
		}
	}
	if sasl != nil {
		sp := p + ".sasl"
		if sasl.Mechanism == nil {
			c.fail(sp+".mechanism", "required: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
		}
		// numaflow-core reads only the part its mechanism names.
		mech := string(*sasl.Mechanism)
		if sasl.GSSAPI != nil && mech != "GSSAPI" {
			c.warn(sp+".gssapi", "ignored with mechanism %s, as Numaflow ignores it", mech)
		}
		if sasl.OAuth != nil && mech != "OAUTHBEARER" && mech != "OAUTH" {
			c.warn(sp+".oauth", "ignored with mechanism %s, as Numaflow ignores it", mech)
		}
		var creds *nf.SASLPlain
		field := ""
		switch mech {
		case "GSSAPI":
			c.fail(sp+".gssapi", "mechanism GSSAPI (Kerberos): the runner's Kafka client supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER")
		case "OAUTHBEARER", "OAUTH":
			o := sasl.OAuth
			if o == nil {
				c.fail(sp+".oauth", "required for mechanism %s: clientID, clientSecret and tokenEndpoint (Numaflow refuses it without)", mech)
			}
			c.setEnv("MV_KAFKA_SASL_MECHANISM", "OAUTHBEARER", sp+".mechanism")
			c.setSecretEnv("MV_KAFKA_SASL_OAUTH_CLIENT_ID", o.ClientID, sp+".oauth.clientID")
			c.setSecretEnv("MV_KAFKA_SASL_OAUTH_CLIENT_SECRET", o.ClientSecret, sp+".oauth.clientSecret")
			if err := kafkaconn.CheckTokenEndpoint(o.TokenEndpoint); err != nil {
				c.fail(sp+".oauth.tokenEndpoint", "%q %v", o.TokenEndpoint, err)
			}
			c.setEnv("MV_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT", o.TokenEndpoint, sp+".oauth.tokenEndpoint")
			return
		}
		switch mech {
		case "PLAIN":
			creds, field = sasl.Plain, "plain"
		case "SCRAM-SHA-256":
			creds, field = sasl.SCRAMSHA256, "scramsha256"
		case "SCRAM-SHA-512":
			creds, field = sasl.SCRAMSHA512, "scramsha512"
		default:
			c.fail(sp+".mechanism", "%q: the runner's Kafka client supports PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER", *sasl.Mechanism)
		}
		if creds == nil {
			c.fail(sp+"."+field, "required for mechanism %s: userSecret and passwordSecret", *sasl.Mechanism)
		}
		c.setEnv("MV_KAFKA_SASL_MECHANISM", string(*sasl.Mechanism), sp+".mechanism")
		c.setSecretEnv("MV_KAFKA_SASL_USER", creds.UserSecret, sp+"."+field+".userSecret")
		c.setSecretEnv("MV_KAFKA_SASL_PASSWORD", creds.PasswordSecret, sp+"."+field+".passwordSecret")
	}
}
