package cewire

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenSource gives the bearer token a Client sends with every request:
// Knative Eventing's OIDC authentication, where a Broker or Channel takes
// only events whose token names its audience.
type TokenSource interface {
	// Token returns the token to send now.
	Token(ctx context.Context) (string, error)
}

// tokenRecheck is how often a token file is looked at for a new token.
var tokenRecheck = time.Second

// fileToken is a token kept in a file that something else renews: a
// projected service account token volume (the kubelet writes a new one
// before 80% of its life is spent) or the Secret a Knative SinkBinding
// mounts at /oidc (its controller renews it before expiry). The file is
// looked at again at most every tokenRecheck.
type fileToken struct {
	path    string
	mu      sync.Mutex
	tok     string
	seen    fileStamp // the file's version tok was read from
	checked time.Time
}

// NewFileToken reads the token at path; an error if it cannot be read or
// is empty.
func NewFileToken(path string) (TokenSource, error) {
	f := &fileToken{path: path}
	if _, err := f.Token(context.Background()); err != nil {
		return nil, err
	}
	return f, nil
}

// Token returns the file's token, read again when the file changed.
func (f *fileToken) Token(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.tok != "" && now.Sub(f.checked) < tokenRecheck {
		return f.tok, nil
	}
	f.checked = now
	fi, err := os.Stat(f.path)
	if err == nil && f.tok != "" && f.seen.same(fi) {
		return f.tok, nil
	}
	var b []byte
	if err == nil {
		b, err = os.ReadFile(f.path)
	}
	tok := strings.TrimSpace(string(b))
	if err == nil && tok == "" {
		err = errors.New("it is empty")
	}
	if err != nil {
		if f.tok != "" {
			// Caught between the kubelet's writes: the last token stands.
			return f.tok, nil
		}
		return "", fmt.Errorf("read the OIDC token %s: %w", f.path, err)
	}
	f.tok, f.seen = tok, stampOf(fi)
	return tok, nil
}

// The in-cluster files of the pod's own service account, which the
// TokenRequest call authenticates with (as client-go's InClusterConfig).
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// tokenLifetime is what Knative's OIDCTokenProvider asks for
	// (TokenExpirationTime in pkg/auth/token_provider.go).
	tokenLifetime = time.Hour
	// tokenRenewBefore is its expirationBufferTime: a token is renewed
	// this long before it expires.
	tokenRenewBefore = 5 * time.Minute
)

// requestedToken is a token for an audience that the Kubernetes API's
// TokenRequest issues for a service account, as Knative's adapters get
// theirs (pkg/auth/token_provider.go GetJWT): valid an hour, kept until
// five minutes before it expires.
type requestedToken struct {
	// url is the service account's token subresource.
	url      string
	audience string
	// apiToken is the file of the pod's own token, which may rotate.
	apiToken string
	http     *http.Client
	now      func() time.Time

	mu        sync.Mutex
	tok       string
	renewFrom time.Time
}

// InCluster is where the TokenRequest API is: the API server's URL, its
// CA and the pod's own token and namespace, as client-go's
// InClusterConfig finds them.
type InCluster struct {
	// APIServer is https://<KUBERNETES_SERVICE_HOST>:<KUBERNETES_SERVICE_PORT>.
	APIServer string
	// CA is the API server's CA in PEM.
	CA []byte
	// TokenFile is the pod's service account token.
	TokenFile string
	// Namespace is the pod's namespace.
	Namespace string
}

// FindInCluster reads the pod's in-cluster settings; namespace, when not
// empty, is used instead of the service account's.
func FindInCluster(namespace string) (InCluster, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return InCluster{}, errors.New("the Kubernetes API is not reachable from here (KUBERNETES_SERVICE_HOST is not set): run in a pod, or mount a projected service account token and name it with MV_OIDC_TOKEN_PATH")
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return InCluster{}, fmt.Errorf("read the API server's CA: %w", err)
	}
	if namespace == "" {
		b, err := os.ReadFile(serviceAccountDir + "/namespace")
		if err != nil {
			return InCluster{}, fmt.Errorf("read the pod's namespace (or set NAMESPACE): %w", err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	return InCluster{APIServer: "https://" + net.JoinHostPort(host, port), CA: ca, TokenFile: serviceAccountDir + "/token", Namespace: namespace}, nil
}

// NewRequestedToken returns tokens for audience that the TokenRequest API
// issues for the service account serviceAccount of c.Namespace. The first
// is asked for at the first request, so a runner starts while the API
// server is away.
func NewRequestedToken(c InCluster, serviceAccount, audience string) (TokenSource, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		return nil, errors.New("the API server's CA holds no PEM certificate")
	}
	return &requestedToken{
		url:      c.APIServer + "/api/v1/namespaces/" + url.PathEscape(c.Namespace) + "/serviceaccounts/" + url.PathEscape(serviceAccount) + "/token",
		audience: audience,
		apiToken: c.TokenFile,
		http: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		},
		now: time.Now,
	}, nil
}

// Token returns the token held, or a new one once it is due for renewal.
// A failed renewal keeps a token that has not expired yet.
func (r *requestedToken) Token(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tok != "" && r.now().Before(r.renewFrom) {
		return r.tok, nil
	}
	tok, exp, err := r.request(ctx)
	if err != nil {
		if r.tok != "" && r.now().Before(r.renewFrom.Add(tokenRenewBefore)) {
			return r.tok, nil
		}
		return "", err
	}
	r.tok = tok
	r.renewFrom = exp.Add(-tokenRenewBefore)
	if life := exp.Sub(r.now()); life < 2*tokenRenewBefore {
		// A token issued for less than asked (the API server's
		// --service-account-max-token-expiration): renew halfway.
		r.renewFrom = r.now().Add(life / 2)
	}
	return tok, nil
}

// request asks the API server for a token.
func (r *requestedToken) request(ctx context.Context) (string, time.Time, error) {
	type tokenRequest struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Audiences         []string `json:"audiences"`
			ExpirationSeconds int64    `json:"expirationSeconds"`
		} `json:"spec"`
		Status struct {
			Token               string    `json:"token"`
			ExpirationTimestamp time.Time `json:"expirationTimestamp"`
		} `json:"status"`
	}
	in := tokenRequest{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"}
	in.Spec.Audiences = []string{r.audience}
	in.Spec.ExpirationSeconds = int64(tokenLifetime / time.Second)
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return "", time.Time{}, err
	}
	apiToken, err := os.ReadFile(r.apiToken)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read the pod's service account token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(apiToken)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("request an OIDC token: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", time.Time{}, fmt.Errorf("request an OIDC token at %s: %s: %s (the runner's service account needs create on serviceaccounts/token)", r.url, resp.Status, bytes.TrimSpace(b))
	}
	var out tokenRequest
	if err := json.Unmarshal(b, &out); err != nil || out.Status.Token == "" {
		return "", time.Time{}, fmt.Errorf("request an OIDC token at %s: the answer holds no token (%v)", r.url, err)
	}
	return out.Status.Token, out.Status.ExpirationTimestamp, nil
}
