// Package admissionmetrics times the operator's admission webhooks and
// sorts their answers by result, for the dashboard and the
// AdmissionWebhookErrors alert.
//
// controller-runtime's own webhook metrics count answers by HTTP status,
// which is 200 for every answer the handler wrote, a refusal or a failure
// included; what the API server does with a pod is in the AdmissionReview
// the handler returns. This package reads that answer on its way out, so
// it needs no change to the webhooks themselves: Server wraps the
// manager's webhook server and instruments every handler registered on
// it.
package admissionmetrics

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Results of an admission request.
const (
	// ResultAllowed: admitted unchanged.
	ResultAllowed = "allowed"
	// ResultPatched: admitted with a patch (a pod gated, a claim's
	// finalizer added).
	ResultPatched = "patched"
	// ResultDenied: refused by the webhook's decision (HTTP 403 in the
	// answer's status).
	ResultDenied = "denied"
	// ResultError: the webhook failed to decide: the answer refuses with
	// another status code (a request it could not decode, an error), or
	// is no AdmissionReview at all. The API server then applies the
	// webhook's failurePolicy.
	ResultError = "error"
)

// duration is the one metric of the package; its _count by result
// counts the answers.
var duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "drastack_webhook_admission_duration_seconds",
	Help: "Time the operator's admission webhooks took to answer, by webhook path and result (allowed, patched, denied, error: the webhook failed to decide and the API server applied its failurePolicy).",
	// The API server gives up after the webhook's timeoutSeconds (10 s
	// by default); an answer from the cache takes about a millisecond.
	Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
}, []string{"webhook", "result"})

var registerOnce sync.Once

// RegisterMetrics registers the metric with controller-runtime's registry,
// once per process.
func RegisterMetrics() {
	registerOnce.Do(func() { ctrlmetrics.Registry.MustRegister(duration) })
}

// Server is a webhook server whose handlers are instrumented.
type Server struct {
	webhook.Server
}

// NewServer wraps s and registers the metric.
func NewServer(s webhook.Server) *Server {
	RegisterMetrics()
	return &Server{Server: s}
}

// Register registers hook at path, instrumented.
func (s *Server) Register(path string, hook http.Handler) {
	s.Server.Register(path, Instrument(path, hook))
}

// Instrument times h and sorts its answers by result under the label
// webhook=path.
func Instrument(path string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		duration.WithLabelValues(path, Classify(rec.status, rec.body.Bytes())).Observe(time.Since(start).Seconds())
	})
}

// Classify sorts an answer: the HTTP status the handler wrote and the body
// of its AdmissionReview.
func Classify(status int, body []byte) string {
	if status != http.StatusOK {
		return ResultError
	}
	var review struct {
		Response *struct {
			Allowed   bool    `json:"allowed"`
			PatchType *string `json:"patchType"`
			Status    *struct {
				Code int32 `json:"code"`
			} `json:"status"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &review); err != nil || review.Response == nil {
		return ResultError
	}
	resp := review.Response
	switch {
	case resp.Allowed && resp.PatchType != nil:
		return ResultPatched
	case resp.Allowed:
		return ResultAllowed
	case resp.Status != nil && resp.Status.Code == http.StatusForbidden:
		return ResultDenied
	}
	return ResultError
}

// maxBody bounds what is kept of an answer: an AdmissionReview with a
// patch is a few kilobytes; one that is cut is classified as an error.
const maxBody = 1 << 20

// recorder passes the answer on and keeps its status and body.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.body.Len()+len(p) <= maxBody {
		r.body.Write(p)
	}
	return r.ResponseWriter.Write(p)
}
