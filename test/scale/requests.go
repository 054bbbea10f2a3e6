package scale

import (
	"net/http"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// Requests counts the requests a client made, by verb and resource, as
// the API server's request info sees them (list and watch apart, get
// apart from list), and keeps every request the API server refused with
// 403 Forbidden.
type Requests struct {
	mu      sync.Mutex
	counts  map[string]int
	refused []string
}

// NewRequests returns an empty counter.
func NewRequests() *Requests { return &Requests{counts: map[string]int{}} }

// Wrap returns a copy of cfg whose requests are counted.
func (r *Requests) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	factory := &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			key := requestKey(factory, req)
			resp, err := rt.RoundTrip(req)
			r.mu.Lock()
			r.counts[key]++
			if resp != nil && resp.StatusCode == http.StatusForbidden {
				r.refused = append(r.refused, key)
			}
			r.mu.Unlock()
			return resp, err
		})
	})
	return cfg
}

// requestKey is "verb resource[/subresource][.group]", or the path of a
// request that is not for a resource (discovery, /version).
func requestKey(factory *apirequest.RequestInfoFactory, req *http.Request) string {
	info, err := factory.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return "discovery " + req.Method
	}
	res := info.Resource
	if info.Subresource != "" {
		res += "/" + info.Subresource
	}
	if info.APIGroup != "" {
		res += "." + info.APIGroup
	}
	return info.Verb + " " + res
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// RequestCounts is a snapshot of Requests.
type RequestCounts struct {
	// ByVerbResource maps "verb resource" to the number of requests.
	ByVerbResource map[string]int `json:"byVerbResource"`
	// Refused lists the "verb resource" of every refused request.
	Refused []string `json:"refused,omitempty"`
}

// Snapshot copies the counts.
func (r *Requests) Snapshot() RequestCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := RequestCounts{ByVerbResource: make(map[string]int, len(r.counts)), Refused: append([]string(nil), r.refused...)}
	for k, v := range r.counts {
		out.ByVerbResource[k] = v
	}
	return out
}

// Total is the number of requests.
func (c RequestCounts) Total() int {
	n := 0
	for _, v := range c.ByVerbResource {
		n += v
	}
	return n
}

// Sorted returns the keys, most requests first.
func (c RequestCounts) Sorted() []string {
	keys := make([]string, 0, len(c.ByVerbResource))
	for k := range c.ByVerbResource {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := c.ByVerbResource[keys[i]], c.ByVerbResource[keys[j]]
		if a != b {
			return a > b
		}
		return keys[i] < keys[j]
	})
	return keys
}

// Minus returns the requests made since before.
func (c RequestCounts) Minus(before RequestCounts) RequestCounts {
	out := RequestCounts{ByVerbResource: map[string]int{}}
	for k, v := range c.ByVerbResource {
		if d := v - before.ByVerbResource[k]; d > 0 {
			out.ByVerbResource[k] = d
		}
	}
	if len(c.Refused) > len(before.Refused) {
		out.Refused = c.Refused[len(before.Refused):]
	}
	return out
}

// countsFile is what the operator child process writes: its counts as of
// its seq-th write.
type countsFile struct {
	Seq    int           `json:"seq"`
	Counts RequestCounts `json:"counts"`
}

func writeCounts(path string, seq int, c RequestCounts) error {
	return writeJSON(path, countsFile{Seq: seq, Counts: c})
}

func readCounts(path string) (countsFile, error) {
	var c countsFile
	err := readJSON(path, "request counts", &c)
	return c, err
}
