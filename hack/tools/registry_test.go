package tools

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// nonRootUID is the uid of distroless' and Chainguard's "nonroot" user, which
// the real base image (ko.yaml) runs as and the test base copies.
const nonRootUID = "65532"

// startRegistry serves an in-memory OCI registry on 127.0.0.1 for the
// duration of the test and returns its host:port. go-containerregistry and
// ko talk plain HTTP to loopback registries, so no TLS is needed.
func startRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushBase pushes a minimal static base image to host: one small layer with
// the passwd entries of a distroless "nonroot" image, a config that runs as
// uid 65532, and this machine's platform so that the binaries ko builds for
// it can run here. It returns the image's reference.
func pushBase(t *testing.T, host string) string {
	t.Helper()
	layer, err := crane.Layer(map[string][]byte{
		"etc/passwd": []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
		"etc/group":  []byte("root:x:0:\nnonroot:x:65532:\n"),
	})
	if err != nil {
		t.Fatalf("base layer: %v", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatalf("base image: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("base config: %v", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config.User = nonRootUID + ":" + nonRootUID
	cf.Config.WorkingDir = "/home/nonroot"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatalf("base config: %v", err)
	}
	ref, err := name.ParseReference(host + "/base/static:nonroot")
	if err != nil {
		t.Fatalf("base reference: %v", err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push base image to %s: %v", ref, err)
	}
	return ref.String()
}

// pullImage fetches the image at ref from the test registry.
func pullImage(t *testing.T, ref string) v1.Image {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatalf("image reference %q: %v", ref, err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	return img
}

// extractFile writes the file at path (absolute, as in the image) from the
// image's flattened filesystem to dir and returns where it wrote it.
func extractFile(img v1.Image, path, dir string) (string, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	want := strings.TrimPrefix(path, "/")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s is not in the image", path)
		}
		if err != nil {
			return "", fmt.Errorf("read image layers: %w", err)
		}
		if strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/") != want {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return "", fmt.Errorf("%s in the image is not a regular file (type %q)", path, h.Typeflag)
		}
		if h.Mode&0o111 == 0 {
			return "", fmt.Errorf("%s in the image is not executable (mode %o)", path, h.Mode)
		}
		out := filepath.Join(dir, filepath.Base(path))
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return "", err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return "", fmt.Errorf("copy %s out of the image: %w", path, err)
		}
		return out, f.Close()
	}
}
