package operator

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

func TestRateLimited(t *testing.T) {
	base := &rest.Config{Host: "https://example", QPS: 20, Burst: 30}
	for _, tc := range []struct {
		name      string
		o         Options
		qps       float32
		burst     int
		unlimited bool
	}{
		{name: "defaults replace controller-runtime's", qps: DefaultKubeAPIQPS, burst: DefaultKubeAPIBurst},
		{name: "options win", o: Options{KubeAPIQPS: 7, KubeAPIBurst: 9}, qps: 7, burst: 9},
		{name: "negative turns the limit off", o: Options{KubeAPIQPS: -5}, qps: -1, burst: DefaultKubeAPIBurst, unlimited: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rateLimited(base, tc.o)
			if got.QPS != tc.qps || got.Burst != tc.burst {
				t.Errorf("QPS %v burst %d, want %v %d", got.QPS, got.Burst, tc.qps, tc.burst)
			}
			if base.QPS != 20 || base.Burst != 30 {
				t.Errorf("the caller's config was changed: %v %d", base.QPS, base.Burst)
			}
			rc, err := rest.RESTClientFor(&rest.Config{Host: got.Host, QPS: got.QPS, Burst: got.Burst,
				ContentConfig: rest.ContentConfig{GroupVersion: &corev1.SchemeGroupVersion, NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
			if err != nil {
				t.Fatal(err)
			}
			if (rc.GetRateLimiter() == nil) != tc.unlimited {
				t.Errorf("rate limiter %v, want unlimited=%v", rc.GetRateLimiter(), tc.unlimited)
			}
		})
	}
}

// Every instance names itself in its User-Agent, after the client's.
func TestUserAgent(t *testing.T) {
	a, b := processIdentity(), processIdentity()
	if a == b {
		t.Fatalf("two instances share the identity %q", a)
	}
	if got := UserAgent("", a); !strings.HasPrefix(got, rest.DefaultKubernetesUserAgent()+" ") || !strings.HasSuffix(got, " drastack-instance/"+a) {
		t.Errorf("UserAgent with client-go's default: %q", got)
	}
	if got := UserAgent("e2e.test/v0", b); got != "e2e.test/v0 drastack-instance/"+b {
		t.Errorf("UserAgent after a set one: %q", got)
	}
}
