package runner

import (
	"embed"
	"io/fs"
	"net/http"
)

// statusFiles is the status page: plain HTML, CSS and JS with no external
// assets, so it works in an air-gapped cluster.
//
//go:embed statuspage
var statusFiles embed.FS

// statusPage serves the status page at / and its assets beside it.
func statusPage() http.Handler {
	sub, err := fs.Sub(statusFiles, "statuspage")
	if err != nil {
		panic(err) // the directory is embedded at build time
	}
	files := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only the page's own files, and nothing from anywhere else.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
