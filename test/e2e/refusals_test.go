//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"k8s.io/client-go/rest"
)

// refusals records every request the API server answered with 403
// Forbidden, as "VERB PATH", once each.
type refusals struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (r *refusals) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[s] = true
}

// list returns the refused requests, sorted.
func (r *refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.seen))
	for s := range r.seen {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// withRefusalCounter returns a copy of cfg whose transport records every
// request refused by authorization (403 "User ... cannot verb resource"):
// an RBAC gap shows as a refused request even where the operator only logs
// the error and retries.
func withRefusalCounter(cfg *rest.Config) (*rest.Config, *refusals) {
	r := &refusals{seen: map[string]bool{}}
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusForbidden {
				// Only authorization refusals count: a 403 also answers a
				// write into a namespace being deleted, which no RBAC rule
				// could allow.
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				resp.Body = io.NopCloser(bytes.NewReader(body))
				if bytes.Contains(body, []byte(" cannot ")) {
					r.add(fmt.Sprintf("%s %s", req.Method, req.URL.Path))
				}
			}
			return resp, err
		})
	})
	return out, r
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
