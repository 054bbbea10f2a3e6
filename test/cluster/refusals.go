package cluster

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"k8s.io/client-go/rest"
)

// Refusals records every request the API server refused for lack of
// permission (403 "User ... cannot verb resource"), as "VERB PATH", once
// each: an RBAC gap shows even where the client only logs the error and
// retries.
type Refusals struct {
	mu   sync.Mutex
	seen map[string]bool
}

// List returns the refused requests, sorted.
func (r *Refusals) List() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.seen))
	for s := range r.seen {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// WithRefusalCounter returns a copy of cfg whose transport records the
// requests refused by authorization. A 403 for another reason (a write
// into a namespace being deleted) is not counted.
func WithRefusalCounter(cfg *rest.Config) (*rest.Config, *Refusals) {
	r := &Refusals{seen: map[string]bool{}}
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusForbidden {
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				resp.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, []byte(" cannot ")) {
					r.mu.Lock()
					r.seen[fmt.Sprintf("%s %s", req.Method, req.URL.Path)] = true
					r.mu.Unlock()
				}
			}
			return resp, err
		})
	})
	return out, r
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
