package natsjs

import (
	"strings"
	"testing"
)

func TestCheckURLs(t *testing.T) {
	for _, c := range []struct {
		list, wantErr string // wantErr "" means valid
	}{
		{"nats://nats:4222", ""},
		{"nats:4222", ""},
		{"tls://a:4222, tls://b:4222", ""},
		{"ws://nats:8080/path", ""},
		{"", "names no server"},
		{" , ", "names no server"},
		{"http://nats:4222", "the scheme must be nats, tls, ws or wss"},
		{"nats://a:4222,ws://b:8080", "cannot be mixed"},
		{"nats://:4222", "has no host"},
		{"nats://nats:70000", "the port must be between 1 and 65535"},
		{"nats://nats:4222/x", "has a path"},
	} {
		err := CheckURLs(c.list)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("CheckURLs(%q) = %v, want nil", c.list, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("CheckURLs(%q) = %v, want an error containing %q", c.list, err, c.wantErr)
		}
	}
}
