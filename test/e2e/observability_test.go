//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	"github.com/drastack/drastack/config/grafana"
	promconfig "github.com/drastack/drastack/config/prometheus"
	"github.com/drastack/drastack/internal/bundle"
	"github.com/drastack/drastack/internal/claimpolicy"
	poolctrl "github.com/drastack/drastack/internal/controller/pool"
	"github.com/drastack/drastack/internal/operator"
	poolpkg "github.com/drastack/drastack/internal/pool"
	"github.com/drastack/drastack/test/cluster"
	"github.com/drastack/drastack/test/opmetrics"
)

// The catalog of the operator's metrics is built when the package
// initialises, before any suite starts an operator: its packages register
// their metrics once per process, and the catalog records those
// registrations (test/opmetrics).
var obsCatalog, obsCatalogErr = opmetrics.Registered()

const (
	obsNamespace = "observability"
	obsDriver    = "gpu.obs.e2e.drastack.io"
	obsClass     = "obs-gpu"
	// obsPool is the MIG-like pool the suite breaks and fixes.
	obsPool = "obs-mig"
	// obsPluginDriver is the example driver of spec.drivers, for the
	// rollout metrics.
	obsPluginDriver = "plugin.obs.e2e.drastack.io"
	// obsPromNamespace and obsPromAccount are the ServiceAccount
	// config/prometheus binds to the metrics reader (kube-prometheus').
	obsPromNamespace = "monitoring"
	obsPromAccount   = "prometheus-k8s"
	// obsInvalidFor replaces DevicePoolInvalid's `for: 5m` in the rules
	// Prometheus loads, so the suite sees it fire in seconds; promtool
	// tests the real duration (config/prometheus/alerts_test.yaml).
	obsInvalidFor = 3 * time.Second
	obsTimeout    = 2 * time.Minute
	// obsRateInterval stands for Grafana's $__rate_interval: longer than
	// the suite, so rates cover everything it did.
	obsRateInterval = "10m"
	// obsPanelPatience is how long a panel may take to show data: a few
	// scrapes and rule evaluations of one second.
	obsPanelPatience = 10 * time.Second
)

type obsKey struct{}

type obsState struct {
	// begin is when the suite started: the dashboard's time range.
	begin        time.Time
	crc          client.Client
	stopOperator func()
	restoreStack func()
	prom         *promServer
	promStarted  time.Time
	metricsURL   string
	promToken    string
	otherToken   string
}

func obsFrom(ctx context.Context, t *testing.T) *obsState {
	t.Helper()
	s, ok := ctx.Value(obsKey{}).(*obsState)
	if !ok {
		t.Fatal("observability suite state missing: Setup failed")
	}
	return s
}

// TestObservability runs a real Prometheus against the operator: it
// scrapes the operator's metrics endpoint the way the ServiceMonitor of
// config/prometheus does (HTTPS, the token of a ServiceAccount bound to
// the metrics reader), evaluates the alert rules of the PrometheusRule,
// and answers every query of the Grafana dashboard.
func TestObservability(t *testing.T) {
	if obsCatalogErr != nil {
		t.Fatalf("metric catalog: %v", obsCatalogErr)
	}
	feature := features.New("Prometheus scrapes the operator").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s := &obsState{begin: time.Now(), crc: prepareFeature(ctx, t, c, obsNamespace)}
			if _, err := c.Client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(obsClass, obsDriver, ""), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			var devices []resourceapi.Device
			for i := range 8 {
				devices = append(devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i)})
			}
			createSlices(ctx, t, c, clNodeSlice(obsDriver, "kwok-node-0", 1, devices))

			ports, err := cluster.FreePorts(2)
			if err != nil {
				t.Fatal(err)
			}
			metricsPort, webhookPort := ports[0], ports[1]
			metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsPort)
			s.metricsURL = "https://" + metricsAddr + "/metrics"
			s.promToken, s.otherToken = obsIdentities(ctx, t, c)
			mon, err := promconfig.ServiceMonitor()
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(c.Dir, "prometheus")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			tokenFile := filepath.Join(dir, "token")
			if err := os.WriteFile(tokenFile, []byte(s.promToken), 0o600); err != nil {
				t.Fatal(err)
			}
			groups, err := promconfig.Groups()
			if err != nil {
				t.Fatal(err)
			}
			rules, err := promconfig.RuleFile(groups, map[string]time.Duration{"DevicePoolInvalid": obsInvalidFor})
			if err != nil {
				t.Fatal(err)
			}
			// Prometheus first: its discovery applies the target only after
			// a 5 s throttle, which then overlaps the operator's start.
			s.promStarted = time.Now()
			s.prom = startPrometheus(ctx, t, c, dir, promScrape{target: metricsAddr, endpoint: mon.Endpoint, tokenFile: tokenFile}, rules)
			if _, err := c.DeployWebhookByURL(ctx, operatorDeployDir, fmt.Sprintf("https://127.0.0.1:%d", webhookPort)); err != nil {
				t.Fatal(err)
			}
			s.stopOperator = startOperator(ctx, t, c, operator.Options{
				MetricsAddr: metricsAddr, MetricsSecure: true,
				ProbeAddr: "0", ProbeNamespace: obsNamespace,
				WebhookPort: webhookPort, WebhookHost: "127.0.0.1",
				ClaimStatusInterval: 500 * time.Millisecond,
				DriverPublishGrace:  3 * time.Second,
				ShutdownTimeout:     10 * time.Second,
			})
			created, prev := writeStackSpec(ctx, t, s.crc, obsTimeout, func(spec *v1alpha1.DRAStackSpec) {
				spec.Claims = v1alpha1.ClaimsSpec{
					Engine: v1alpha1.EngineNative, GatePods: ptr.To(true),
					Central: []v1alpha1.CentralDevices{{Driver: obsDriver, Classes: []string{obsClass}, AllowImmediate: true}},
				}
				spec.Drivers = []v1alpha1.DriverSpec{{
					Name: obsPluginDriver, Profile: v1alpha1.DriverProfileExample,
					NodeSelector:  map[string]string{"kubernetes.io/hostname": "kwok-node-1"},
					RemovalPolicy: v1alpha1.RemovalPolicyForce,
				}}
			})
			s.restoreStack = func() {
				if created {
					deleteStack(ctx, t, s.crc)
					return
				}
				writeStackSpec(ctx, t, s.crc, obsTimeout, func(spec *v1alpha1.DRAStackSpec) {
					spec.Claims, spec.Drivers = prev.Claims, prev.Drivers
				})
			}
			clWaitCentral(ctx, t, c, obsDriver)
			// The manager opens its metrics listener as it starts, beside
			// the controllers: the central taints can be there (or left
			// from an earlier suite) before it listens.
			if err := wait.PollUntilContextTimeout(ctx, pollInterval, obsTimeout, true, func(ctx context.Context) (bool, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", metricsAddr)
				if err != nil {
					return false, nil //nolint:nilerr // retried until the listener is up
				}
				return true, conn.Close()
			}); err != nil {
				t.Fatalf("the operator's metrics endpoint %s never listened: %v", metricsAddr, err)
			}

			return context.WithValue(ctx, obsKey{}, s)
		}).
		Assess("the metrics endpoint answers only callers the API server authorizes", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := obsFrom(ctx, t)
			for _, tc := range []struct {
				who, token string
				want       int
			}{
				{"no token", "", http.StatusUnauthorized},
				{"a ServiceAccount without the metrics reader role", s.otherToken, http.StatusForbidden},
				{"Prometheus' ServiceAccount", s.promToken, http.StatusOK},
			} {
				code, body := obsScrape(ctx, t, s.metricsURL, tc.token)
				if code != tc.want {
					t.Errorf("GET %s as %s: %d, want %d", s.metricsURL, tc.who, code, tc.want)
				}
				if code == http.StatusOK && !strings.Contains(body, "drastack_pool_validation_duration_seconds") {
					t.Errorf("GET %s as %s: no drastack metrics in the answer", s.metricsURL, tc.who)
				}
			}
			return ctx
		}).
		Assess("Prometheus scrapes the operator and evaluates every rule", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := obsFrom(ctx, t)
			begin := time.Now()
			var last string
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, obsTimeout, true, func(ctx context.Context) (bool, error) {
				targets, err := s.prom.targets(ctx)
				if err != nil || len(targets) != 1 {
					last = fmt.Sprintf("targets %+v, %v", targets, err)
					return false, nil
				}
				last = fmt.Sprintf("%s: %s %s", targets[0].ScrapeURL, targets[0].Health, targets[0].LastError)
				return targets[0].Health == "up", nil
			})
			if err != nil {
				t.Fatalf("the operator's endpoint is not up in Prometheus: %s\n%s", last, s.prom.tail())
			}
			t.Logf("timing: Prometheus scrapes the operator %s after this step began (%s after Prometheus started)", since(begin), since(s.promStarted))
			groups, err := promconfig.Groups()
			if err != nil {
				t.Fatal(err)
			}
			want := len(promconfig.Alerts(groups))
			err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, obsTimeout, true, func(ctx context.Context) (bool, error) {
				rules, err := s.prom.rules(ctx)
				if err != nil {
					last = err.Error()
					return false, nil
				}
				ok := 0
				var bad []string
				for _, r := range rules {
					switch r.Health {
					case "ok":
						ok++
					case "err":
						bad = append(bad, r.Name+": "+r.LastError)
					}
				}
				if len(bad) > 0 {
					return false, fmt.Errorf("rules fail to evaluate: %s", strings.Join(bad, "; "))
				}
				last = fmt.Sprintf("%d of %d rules evaluated", ok, len(rules))
				return len(rules) == want && ok == want, nil
			})
			if err != nil {
				t.Fatalf("rules: %v (%s)", err, last)
			}
			// Every drastack family Prometheus sees is one the catalog
			// knows: the catalog the dashboard test trusts is complete.
			scraped, err := s.prom.query(ctx, `count by (__name__) ({__name__=~"drastack_.+"})`)
			if err != nil {
				t.Fatal(err)
			}
			for _, smp := range scraped {
				name := smp.Metric["__name__"]
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suffix); ok && obsCatalog.Registers(b) {
						base = b
					}
				}
				if !obsCatalog.Registers(base) {
					t.Errorf("Prometheus scraped %s, which the metric catalog does not know", name)
				}
			}
			return ctx
		}).
		Assess("DevicePoolInvalid fires for a broken pool and resolves once it is fixed", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), obsFrom(ctx, t)
			id := poolpkg.ID{Driver: poolsMIGDriver, Pool: obsPool}
			broken := migPoolSlices(obsPool, "kwok-node-1", "no-such-counter")
			createSlices(ctx, t, c, broken...)
			waitDevicePool(ctx, t, s.crc, id, "Invalid with MissingCounter", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Health == v1alpha1.PoolInvalid && st.Reason == string(poolpkg.ReasonMissingCounter)
			})
			begin := time.Now()
			firing := obsWaitAlert(ctx, t, s.prom, "DevicePoolInvalid", obsPool, true)
			took := time.Since(begin)
			t.Logf("timing: DevicePool Invalid -> DevicePoolInvalid firing in Prometheus in %s (for: %s in this suite)", took.Round(10*time.Millisecond), obsInvalidFor)
			if firing.Labels["driver"] != poolsMIGDriver || firing.Labels["reason"] != string(poolpkg.ReasonMissingCounter) || firing.Labels["severity"] != "critical" {
				t.Errorf("firing alert labels %v", firing.Labels)
			}
			if took < obsInvalidFor {
				t.Errorf("the alert fired %s after the pool turned Invalid, before its for: of %s", took, obsInvalidFor)
			}

			for _, sl := range broken {
				if err := c.Client.ResourceV1().ResourceSlices().Delete(ctx, sl.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			createSlices(ctx, t, c, migPoolSlices(obsPool, "kwok-node-1", "memory")...)
			waitDevicePool(ctx, t, s.crc, id, "Healthy once fixed", func(st *v1alpha1.DevicePoolStatus) bool {
				return st.Health == v1alpha1.PoolHealthy && st.Devices.Total == 5
			})
			begin = time.Now()
			obsWaitAlert(ctx, t, s.prom, "DevicePoolInvalid", obsPool, false)
			t.Logf("timing: DevicePool Healthy -> DevicePoolInvalid resolved in Prometheus in %s", since(begin))
			return ctx
		}).
		Assess("the operator's claims, webhooks and drivers show in Prometheus", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c, s := mustCluster(ctx, t), obsFrom(ctx, t)
			clCreateTemplate(ctx, t, c, obsNamespace, "obs-gpu", nil, nil, clClaimSpec(obsClass, 1, ""))
			// Two rounds, each an immediate claim and a gated pod: a rate
			// (and so a quantile) needs a counter to grow between two
			// scrapes, and a series is new at its first observation.
			for round := range 2 {
				claim := fmt.Sprintf("immediate-%d", round)
				clCreateClaim(ctx, t, c, obsNamespace, claim,
					map[string]string{claimpolicy.AllocationLabel: claimpolicy.AllocationImmediate}, nil, clClaimSpec(obsClass, 1, ""))
				pod := fmt.Sprintf("placed-%d", round)
				if _, err := c.Client.CoreV1().Pods(obsNamespace).Create(ctx, claimPod(obsNamespace, pod, "obs-gpu"), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				clWaitClaim(ctx, t, c, obsNamespace, claim, "allocated by the operator", clAllocated)
				waitPodRunning(ctx, t, c, obsNamespace, pod)
				obsWaitQuery(ctx, t, s.prom, fmt.Sprintf(`sum(drastack_claim_allocations_total{result="Allocated"}) >= %d`, round+1))
				obsWaitQuery(ctx, t, s.prom, fmt.Sprintf(`sum(drastack_claim_placements_total{result="Allocated"}) >= %d`, round+1))
				obsWaitQuery(ctx, t, s.prom, fmt.Sprintf(`sum(drastack_webhook_admission_duration_seconds_count{result="patched"}) >= %d`, round+1))
			}
			// The claim metrics of issue 26: each claim allocated (two
			// immediate, two of pods) was timed by the engine and its
			// latency observed as Allocated; all of them hold central
			// devices; every pending reason has its series.
			obsWaitQuery(ctx, t, s.prom, `sum(drastack_claim_allocation_latency_seconds_count{result="Allocated"}) >= 4`)
			obsWaitQuery(ctx, t, s.prom, `sum(drastack_claim_engine_duration_seconds_count{result="Allocated"}) >= 4`)
			obsWaitQuery(ctx, t, s.prom, fmt.Sprintf(`drastack_claim_central_devices{driver=%q, state="allocated"} >= 4`, obsDriver))
			obsWaitQuery(ctx, t, s.prom, fmt.Sprintf(`count(drastack_claims_pending) == %d`, len(claimpolicy.PendingReasons)))
			// Every admission was answered: no error results, so the
			// AdmissionWebhookErrors alert has nothing to count.
			if n, err := obsValues(ctx, s.prom, `sum(drastack_webhook_admission_duration_seconds_count{result="error"}) > 0`); err != nil || n > 0 {
				t.Errorf("admission answers with errors in a healthy run (%d series, %v)", n, err)
			}
			obsWaitQuery(ctx, t, s.prom, fmt.Sprintf(`drastack_driver_status{driver=%q}`, obsPluginDriver))
			obsWaitQuery(ctx, t, s.prom, fmt.Sprintf(`drastack_driver_nodes{driver=%q, state="desired"} >= 1`, obsPluginDriver))
			return ctx
		}).
		Assess("every dashboard panel shows data over the suite's time range, or is event-driven", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s := obsFrom(ctx, t)
			d, err := grafana.Load()
			if err != nil {
				t.Fatal(err)
			}
			var withData, eventDriven []string
			for _, p := range d.AllPanels() {
				for _, tg := range p.Targets {
					label := fmt.Sprintf("panel %d %q query %s", p.ID, p.Title, tg.RefID)
					expr, err := d.Expand(tg.Expr, obsRateInterval)
					if err != nil {
						t.Errorf("%s: %v", label, err)
						continue
					}
					if _, err := obsCatalog.Check(expr); err != nil {
						t.Errorf("%s: %v", label, err)
						continue
					}
					// A panel that is not event-driven gets a few scrapes
					// to show the last round of the previous step (a rate
					// needs two samples of a grown counter).
					patience := obsPanelPatience
					if grafana.EventDriven[p.ID] != "" {
						patience = 0
					}
					n, err := obsPanelData(ctx, s, expr, tg.Instant, patience)
					switch {
					case err != nil:
						t.Errorf("%s: %v\n%s", label, err, expr)
					case n > 0:
						withData = append(withData, label)
					case grafana.EventDriven[p.ID] != "":
						eventDriven = append(eventDriven, fmt.Sprintf("%s (%s)", label, grafana.EventDriven[p.ID]))
					default:
						t.Errorf("%s returns no data on the running operator:\n%s", label, expr)
					}
				}
			}
			for _, v := range d.Templating.List {
				if v.Type != "query" {
					continue
				}
				q, err := v.VariableQuery()
				if err != nil {
					t.Fatal(err)
				}
				metric, _, _ := strings.Cut(strings.TrimPrefix(q, "label_values("), ",")
				if n, err := obsValues(ctx, s.prom, strings.TrimSpace(metric)); err != nil || n == 0 {
					t.Errorf("variable %s (%s) has no values: %v", v.Name, q, err)
				}
			}
			t.Logf("%d queries return data; empty and event-driven: %v", len(withData), eventDriven)
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s, ok := ctx.Value(obsKey{}).(*obsState)
			if !ok {
				return ctx
			}
			s.prom.stop(t)
			for round := range 2 {
				_ = c.Client.CoreV1().Pods(obsNamespace).Delete(ctx, fmt.Sprintf("placed-%d", round), metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
				_ = c.Client.ResourceV1().ResourceClaims(obsNamespace).Delete(ctx, fmt.Sprintf("immediate-%d", round), metav1.DeleteOptions{})
			}
			_ = c.Client.ResourceV1().ResourceClaimTemplates(obsNamespace).Delete(ctx, "obs-gpu", metav1.DeleteOptions{})
			if s.restoreStack != nil {
				// While the operator runs: its finalizers remove the driver
				// and the central taints.
				s.restoreStack()
			}
			clRemoveWebhook(ctx, t, c)
			if s.stopOperator != nil {
				s.stopOperator()
			}
			deleteDriverSlices(ctx, t, c, obsDriver)
			for _, name := range []string{"counters", "partitions"} {
				_ = c.Client.ResourceV1().ResourceSlices().Delete(ctx, fmt.Sprintf("%s-%s-%s", strings.Split(poolsMIGDriver, ".")[0], obsPool, name), metav1.DeleteOptions{})
			}
			_ = c.Client.ResourceV1().DeviceClasses().Delete(ctx, obsClass, metav1.DeleteOptions{})
			for _, d := range []string{obsDriver, poolsMIGDriver} {
				if err := s.crc.DeleteAllOf(ctx, &v1alpha1.DevicePool{}, client.MatchingLabels{poolctrl.LabelDriver: d}); err != nil {
					t.Errorf("delete DevicePools of %s: %v", d, err)
				}
			}
			_ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "drastack-metrics-reader", metav1.DeleteOptions{})
			_ = c.Client.CoreV1().Namespaces().Delete(ctx, obsPromNamespace, metav1.DeleteOptions{})
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}

// obsIdentities applies the ClusterRoleBinding of config/prometheus (the
// metrics reader for kube-prometheus' ServiceAccount), creates that
// ServiceAccount and one without the role, and returns a token of each.
func obsIdentities(ctx context.Context, t *testing.T, c *cluster.Cluster) (reader, other string) {
	t.Helper()
	objs, err := bundle.Build("../../config/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(ctx, t, c.Client, obsPromNamespace)
	bound := false
	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := c.Kubectl(ctx, "apply", "--server-side", "-f", writeTemp(t, data)); err != nil {
			t.Fatalf("apply %s: %v\n%s", o.GetName(), err, out)
		}
		bound = true
	}
	if !bound {
		t.Fatal("config/prometheus renders no ClusterRoleBinding")
	}
	token := func(ns, name string) string {
		_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token of %s/%s: %v", ns, name, err)
		}
		return tr.Status.Token
	}
	return token(obsPromNamespace, obsPromAccount), token(obsNamespace, "not-a-metrics-reader")
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "object.yaml")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// obsScrape GETs the metrics endpoint with a bearer token, skipping the
// certificate check as the ServiceMonitor does.
func obsScrape(ctx context.Context, t *testing.T, url, token string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the operator's self-signed certificate, as the ServiceMonitor scrapes it
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// obsWaitAlert waits until the alert for pool is firing (or, with firing
// false, is neither firing nor pending) and returns it.
func obsWaitAlert(ctx context.Context, t *testing.T, p *promServer, name, pool string, firing bool) promAlert {
	t.Helper()
	var found promAlert
	var last []promAlert
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, obsTimeout, true, func(ctx context.Context) (bool, error) {
		alerts, err := p.alerts(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // retried
		}
		last = alerts
		for _, a := range alerts {
			if a.Labels["alertname"] == name && a.Labels["pool"] == pool {
				found = a
				return firing && a.State == "firing", nil
			}
		}
		return !firing, nil
	})
	if err != nil {
		t.Fatalf("alert %s for pool %s firing=%v: %v; alerts: %+v", name, pool, firing, err, last)
	}
	return found
}

// obsPanelData runs a panel's query as Grafana does, over the dashboard's
// time range (here: the suite so far) unless it is instant (the tables:
// what is true now), until it returns data or patience runs out, and
// returns how many series have a number.
func obsPanelData(ctx context.Context, s *obsState, expr string, instant bool, patience time.Duration) (int, error) {
	deadline := time.Now().Add(patience)
	for {
		var n int
		var err error
		if instant {
			n, err = obsValues(ctx, s.prom, expr)
		} else {
			n, err = s.prom.queryRange(ctx, expr, s.begin, time.Now(), time.Second)
		}
		if err != nil || n > 0 || time.Now().After(deadline) {
			return n, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// obsWaitQuery waits until an instant query returns a series.
func obsWaitQuery(ctx context.Context, t *testing.T, p *promServer, expr string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, obsTimeout, true, func(ctx context.Context) (bool, error) {
		n, err := obsValues(ctx, p, expr)
		return err == nil && n > 0, nil
	})
	if err != nil {
		t.Fatalf("Prometheus has no %s: %v", expr, err)
	}
}

// obsValues runs an instant query and counts the series with a number
// (NaN, the quantile of nothing observed, is no data).
func obsValues(ctx context.Context, p *promServer, expr string) (int, error) {
	samples, err := p.query(ctx, expr)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range samples {
		if _, ok := s.number(); ok {
			n++
		}
	}
	return n, nil
}
