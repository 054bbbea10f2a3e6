//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	promconfig "github.com/drastack/drastack/config/prometheus"
	"github.com/drastack/drastack/test/cluster"
)

// promServer is a real Prometheus (built by hack/build-prometheus.sh)
// running as a process of the test, on loopback only.
type promServer struct {
	addr string
	cmd  *exec.Cmd
	done chan error
	log  string
}

// promScrape is the scrape the suite configures: the operator's metrics
// endpoint as the ServiceMonitor of config/prometheus scrapes it, with the
// target given by address instead of found through the metrics Service.
type promScrape struct {
	target    string
	endpoint  promconfig.Endpoint
	tokenFile string
}

// startPrometheus writes the configuration and the rule file into dir and
// starts Prometheus, scraping and evaluating every second, and waits until
// it is ready.
func startPrometheus(ctx context.Context, t *testing.T, c *cluster.Cluster, dir string, scrape promScrape, rules []byte) *promServer {
	t.Helper()
	bin, err := promconfig.Binary("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ep := scrape.endpoint
	job := map[string]any{
		"job_name":        "drastack",
		"scheme":          ep.Scheme,
		"metrics_path":    ep.Path,
		"scrape_interval": "1s",
		"scrape_timeout":  "1s",
		// bearerTokenFile of the ServiceMonitor is what the Prometheus
		// Operator renders as the authorization credentials file.
		"authorization":  map[string]any{"type": "Bearer", "credentials_file": scrape.tokenFile},
		"tls_config":     map[string]any{"insecure_skip_verify": ep.TLSConfig.InsecureSkipVerify},
		"static_configs": []any{map[string]any{"targets": []string{scrape.target}}},
	}
	config := map[string]any{
		"global":         map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"},
		"rule_files":     []string{"rules.yaml"},
		"scrape_configs": []any{job},
	}
	data, err := yaml.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"prometheus.yml": data, "rules.yaml": rules} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logDir := c.LogDir
	if logDir == "" {
		logDir = dir
	}
	logPath := filepath.Join(logDir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &promServer{addr: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan error, 1), log: logPath}
	p.cmd = exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.addr,
		"--log.level=warn")
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// Dies with the test binary, however it ends (a timeout, a signal).
	p.cmd.SysProcAttr = cluster.ChildProcAttr()
	begin := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	go func() { p.done <- p.cmd.Wait(); logFile.Close() }()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.done:
			return false, fmt.Errorf("prometheus exited: %v\n%s", err, p.tail())
		default:
		}
		resp, err := http.Get("http://" + p.addr + "/-/ready")
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.stop(t)
		t.Fatalf("prometheus not ready: %v", err)
	}
	t.Logf("timing: prometheus %s ready in %s", bin, since(begin))
	return p
}

// stop ends the Prometheus process.
func (p *promServer) stop(t *testing.T) {
	t.Helper()
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of Prometheus' log.
func (p *promServer) tail() string {
	data, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// get calls the HTTP API and decodes its data into out.
func (p *promServer) get(ctx context.Context, path string, params url.Values, out any) error {
	u := "http://" + p.addr + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// promSample is one series of an instant query's result.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// number is the sample's value; NaN (a quantile of no observations) is
// no number.
func (s promSample) number() (float64, bool) {
	v, ok := s.Value[1].(string)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	return f, err == nil && !math.IsNaN(f)
}

// query runs an instant query.
func (p *promServer) query(ctx context.Context, expr string) ([]promSample, error) {
	var data struct {
		ResultType string       `json:"resultType"`
		Result     []promSample `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", expr, data.ResultType)
	}
	return data.Result, nil
}

// queryRange runs a range query, as Grafana does for a panel that is not
// instant, and counts the series with at least one number (NaN is none).
func (p *promServer) queryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (int, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	params := url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {step.String()},
	}
	if err := p.get(ctx, "/api/v1/query_range", params, &data); err != nil {
		return 0, err
	}
	if data.ResultType != "matrix" {
		return 0, fmt.Errorf("query %s: result type %s, want matrix", expr, data.ResultType)
	}
	n := 0
	for _, series := range data.Result {
		for _, v := range series.Values {
			if _, ok := (promSample{Value: v}).number(); ok {
				n++
				break
			}
		}
	}
	return n, nil
}

// promAlert is an alert of /api/v1/alerts.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (p *promServer) alerts(ctx context.Context) ([]promAlert, error) {
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := p.get(ctx, "/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

// promTarget is a scrape target of /api/v1/targets.
type promTarget struct {
	ScrapeURL string `json:"scrapeUrl"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func (p *promServer) targets(ctx context.Context) ([]promTarget, error) {
	var data struct {
		Active []promTarget `json:"activeTargets"`
	}
	err := p.get(ctx, "/api/v1/targets", nil, &data)
	return data.Active, err
}

// promRule is a rule of /api/v1/rules.
type promRule struct {
	Name      string `json:"name"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func (p *promServer) rules(ctx context.Context) ([]promRule, error) {
	var data struct {
		Groups []struct {
			Rules []promRule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var out []promRule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}
