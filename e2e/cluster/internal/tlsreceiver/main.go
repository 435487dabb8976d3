// Command tlsreceiver is the cluster tests' https subscriber: it serves
// CloudEvents over TLS on :8443 with the certificate in /tls (a Secret the
// test makes from its own CA), counts each event by id, and reports the
// counts as JSON over plain http on :8080 GET /count for the test's
// port-forward. A Trigger under transport-encryption strict delivers here.
package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"
)

// counts is what GET /count answers.
type counts struct {
	// Requests is every POST; Unique the distinct ce-id values among them.
	Requests int `json:"requests"`
	Unique   int `json:"unique"`
	// Bearer counts requests that carried an Authorization: Bearer token.
	Bearer int `json:"bearer"`
	// Types counts events per ce-type.
	Types map[string]int `json:"types"`
}

func main() {
	var mu sync.Mutex
	seen := map[string]bool{}
	c := counts{Types: map[string]int{}}
	events := http.NewServeMux()
	events.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 4<<20))
		id, typ := r.Header.Get("Ce-Id"), r.Header.Get("Ce-Type")
		if id == "" {
			http.Error(w, "not a binary-mode CloudEvent: no ce-id", http.StatusBadRequest)
			return
		}
		mu.Lock()
		c.Requests++
		if !seen[id] {
			seen[id] = true
			c.Unique++
			c.Types[typ]++
		}
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			c.Bearer++
		}
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	})
	report := http.NewServeMux()
	report.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	})
	go func() {
		s := &http.Server{Addr: ":8080", Handler: report, ReadHeaderTimeout: 10 * time.Second}
		log.Fatal(s.ListenAndServe())
	}()
	s := &http.Server{Addr: ":8443", Handler: events, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(s.ListenAndServeTLS("/tls/tls.crt", "/tls/tls.key"))
}
