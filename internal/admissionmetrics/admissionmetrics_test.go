package admissionmetrics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// handlerFunc answers every request with one fixed response.
type handlerFunc func(context.Context, admission.Request) admission.Response

func (f handlerFunc) Handle(ctx context.Context, r admission.Request) admission.Response {
	return f(ctx, r)
}

func review(t *testing.T) []byte {
	t.Helper()
	obj, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": "p"}})
	data, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "1", Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: obj},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func count(t *testing.T, path, result string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := duration.WithLabelValues(path, result).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestInstrument sends AdmissionReviews through controller-runtime's
// admission webhook wrapped by Instrument and checks each answer lands
// under its result.
func TestInstrument(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resp   admission.Response
		body   []byte
		result string
	}{
		{"allowed", admission.Allowed(""), nil, ResultAllowed},
		{"patched", admission.Patched("", jsonpatch.NewOperation("add", "/metadata/labels", map[string]any{"a": "b"})), nil, ResultPatched},
		{"denied", admission.Denied("no"), nil, ResultDenied},
		{"errored", admission.Errored(http.StatusInternalServerError, errors.New("cache not synced")), nil, ResultError},
		// controller-runtime answers a body it cannot decode with an
		// error of its own, still HTTP 200.
		{"undecodable", admission.Allowed(""), []byte("{not json"), ResultError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/test-" + tc.name
			wh := &admission.Webhook{Handler: handlerFunc(func(context.Context, admission.Request) admission.Response { return tc.resp })}
			h := Instrument(path, wh)
			body := tc.body
			if body == nil {
				body = review(t)
			}
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			before := count(t, path, tc.result)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got := count(t, path, tc.result) - before; got != 1 {
				t.Errorf("%s answers counted under %s: %d, want 1 (body %s)", tc.name, tc.result, got, rec.Body)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		{200, `{"response":{"allowed":true}}`, ResultAllowed},
		{200, `{"response":{"allowed":true,"patchType":"JSONPatch","patch":"W10="}}`, ResultPatched},
		{200, `{"response":{"allowed":false,"status":{"code":403}}}`, ResultDenied},
		{200, `{"response":{"allowed":false,"status":{"code":400}}}`, ResultError},
		{200, `{"response":{"allowed":false}}`, ResultError},
		{200, `{}`, ResultError},
		{200, ``, ResultError},
		{500, `{"response":{"allowed":true}}`, ResultError},
	} {
		if got := Classify(tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("Classify(%d, %s) = %s, want %s", tc.status, tc.body, got, tc.want)
		}
	}
}

// FuzzClassify: no answer makes the classifier panic, and it always
// names one of the four results.
func FuzzClassify(f *testing.F) {
	f.Add(200, []byte(`{"response":{"allowed":true}}`))
	f.Add(500, []byte(`{"response":{"allowed":false,"status":{"code":403}}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		switch Classify(status, body) {
		case ResultAllowed, ResultPatched, ResultDenied, ResultError:
		default:
			t.Fatal("unknown result")
		}
	})
}

// TestServerInstrumentsRegisteredHooks checks the wrapper instruments what
// is registered on it.
func TestServerInstrumentsRegisteredHooks(t *testing.T) {
	inner := &fakeServer{handlers: map[string]http.Handler{}}
	s := NewServer(inner)
	s.Register("/wrapped", &admission.Webhook{Handler: handlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Allowed("") })})
	h, ok := inner.handlers["/wrapped"]
	if !ok {
		t.Fatal("not registered on the wrapped server")
	}
	before := count(t, "/wrapped", ResultAllowed)
	req := httptest.NewRequest(http.MethodPost, "/wrapped", bytes.NewReader(review(t)))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got := count(t, "/wrapped", ResultAllowed) - before; got != 1 {
		t.Errorf("counted %d, want 1", got)
	}
}
