// Package cewiretest has the test fixtures that the CloudEvents sink's and
// transformer's tests share.
package cewiretest

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// RedirectingReceiver starts a receiver on loopback that answers every
// post with 301 Moved Permanently (a permanent answer under Knative's
// delivery rules) and counts the posts. It stops when the test ends.
func RedirectingReceiver(t testing.TB) (url string, posts *atomic.Int64) {
	posts = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Redirect(w, r, "/elsewhere", http.StatusMovedPermanently)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, posts
}
