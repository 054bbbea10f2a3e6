// Package opmetrics tells which metrics the operator registers and checks
// PromQL expressions (the Grafana dashboard's queries, the alert rules)
// against them with Prometheus' own parser. The tests of config/grafana,
// config/prometheus and the observability e2e suite use it; the operator
// does not.
//
// The catalog is read from controller-runtime's registry, not from a list
// kept by hand: Registered builds the operator exactly as cmd/manager does
// (internal/operator.New, pod webhook on), with a static REST mapper in
// place of API discovery so that no API server is needed, and records
// every collector registered in controller-runtime's registry meanwhile.
// Metrics registered before that (controller-runtime's own, at package
// initialisation) are read from the registry's Gather.
package opmetrics

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/drastack/drastack/internal/operator"
)

// Kind is a metric family's type.
type Kind string

// The kinds of metric families. Unknown is a family that a custom
// collector describes but did not collect while the catalog was built
// (the pool metrics, computed from the validator's state at scrape time):
// its type is not known, so only its plain name may be queried.
const (
	Counter   Kind = "counter"
	Gauge     Kind = "gauge"
	Histogram Kind = "histogram"
	Summary   Kind = "summary"
	Unknown   Kind = "unknown"
)

// Family is one metric family.
type Family struct {
	// Name is the family's name as exposed (counters end in _total).
	Name string
	// Kind is its type.
	Kind Kind
	// Labels are its label names, sorted (variable and constant ones).
	Labels []string
	// Help is its help text.
	Help string
}

// HasLabel says whether the family's series carry label l.
func (f Family) HasLabel(l string) bool { return slices.Contains(f.Labels, l) }

// Catalog holds the metric families the operator registers.
type Catalog struct {
	families map[string]Family
}

var (
	once       sync.Once
	registered *Catalog
	buildErr   error
)

// Registered returns the catalog of the operator's metrics. It builds the
// operator once per process (controller-runtime's registry is global, and
// the operator's packages register their metrics once per process), so
// call it before anything else in the process builds the operator.
func Registered() (*Catalog, error) {
	once.Do(func() { registered, buildErr = build() })
	return registered, buildErr
}

// recorder passes registrations on to controller-runtime's registry and
// keeps the collectors that were accepted.
type recorder struct {
	ctrlmetrics.RegistererGatherer
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.RegistererGatherer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func build() (*Catalog, error) {
	rec := &recorder{RegistererGatherer: ctrlmetrics.Registry}
	ctrlmetrics.Registry = rec
	defer func() { ctrlmetrics.Registry = rec.RegistererGatherer }()

	scheme := operator.Scheme()
	static := func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
		m := meta.NewDefaultRESTMapper(nil)
		for gvk := range scheme.AllKnownTypes() {
			m.Add(gvk, meta.RESTScopeNamespace)
		}
		return m, nil
	}
	// An address nothing listens on: nothing is started, so nothing is
	// asked; a request would fail rather than reach a cluster.
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	if _, err := operator.New(cfg, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		WebhookPort: 9443, WebhookSelfSigned: true,
		SkipNameValidation: true,
		MapperProvider:     static,
	}); err != nil {
		return nil, fmt.Errorf("build the operator: %w", err)
	}

	c := &Catalog{families: map[string]Family{}}
	for _, col := range rec.collectors {
		fams, err := describe(col)
		if err != nil {
			return nil, err
		}
		for _, f := range fams {
			c.add(f)
		}
	}
	gathered, err := rec.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather controller-runtime's registry: %w", err)
	}
	for _, mf := range gathered {
		c.add(fromDTO(mf))
	}
	return c, nil
}

// add records a family. A family seen twice (described by a recorded
// collector, then gathered) keeps its description's labels, which name
// every label rather than those of the series that exist, and takes the
// type from the second sighting if the first did not know it.
func (c *Catalog) add(f Family) {
	have, ok := c.families[f.Name]
	switch {
	case !ok:
		c.families[f.Name] = f
	case have.Kind == Unknown:
		have.Kind = f.Kind
		c.families[f.Name] = have
	}
}

// Families returns the registered families, sorted by name.
func (c *Catalog) Families() []Family {
	out := make([]Family, 0, len(c.families))
	for _, f := range c.families {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Family returns a registered family.
func (c *Catalog) Family(name string) (Family, bool) {
	f, ok := c.families[name]
	return f, ok
}

// Registers says whether the operator registers the family.
func (c *Catalog) Registers(name string) bool {
	_, ok := c.families[name]
	return ok
}

// describe turns a collector into its families: names and labels from its
// descriptions, types from what it collects, or from the vector type for
// a vector without children yet.
func describe(col prometheus.Collector) ([]Family, error) {
	descs := make(chan *prometheus.Desc, 64)
	go func() { col.Describe(descs); close(descs) }()
	var out []Family
	byDesc := map[string]int{}
	for d := range descs {
		f, err := parseDesc(d)
		if err != nil {
			return nil, err
		}
		byDesc[d.String()] = len(out)
		out = append(out, f)
	}
	metrics := make(chan prometheus.Metric, 64)
	go func() { col.Collect(metrics); close(metrics) }()
	for m := range metrics {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			return nil, fmt.Errorf("collect %s: %w", m.Desc(), err)
		}
		if i, ok := byDesc[m.Desc().String()]; ok && out[i].Kind == Unknown {
			out[i].Kind = kindOfMetric(&pb)
		}
	}
	vecKind := Unknown
	switch col.(type) {
	case *prometheus.CounterVec:
		vecKind = Counter
	case *prometheus.GaugeVec:
		vecKind = Gauge
	case *prometheus.HistogramVec:
		vecKind = Histogram
	case *prometheus.SummaryVec:
		vecKind = Summary
	}
	for i := range out {
		if out[i].Kind == Unknown {
			out[i].Kind = vecKind
		}
	}
	return out, nil
}

func kindOfMetric(pb *dto.Metric) Kind {
	switch {
	case pb.Counter != nil:
		return Counter
	case pb.Gauge != nil:
		return Gauge
	case pb.Histogram != nil:
		return Histogram
	case pb.Summary != nil:
		return Summary
	}
	return Unknown
}

// descFormat matches prometheus.Desc's String: the only way client_golang
// shows a description's name and labels. TestParseDesc fails if that
// format changes.
var descFormat = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{([^}]*)\}\}$`)

var constLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

// parseDesc reads a description's name, help and label names.
func parseDesc(d *prometheus.Desc) (Family, error) {
	if err := d.Err(); err != nil {
		return Family{}, fmt.Errorf("invalid metric description %s: %w", d, err)
	}
	m := descFormat.FindStringSubmatch(d.String())
	if m == nil {
		return Family{}, fmt.Errorf("cannot read metric description %s", d)
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		return Family{}, fmt.Errorf("metric description %s: name: %w", d, err)
	}
	help, err := strconv.Unquote(m[2])
	if err != nil {
		return Family{}, fmt.Errorf("metric description %s: help: %w", d, err)
	}
	var labels []string
	for _, pair := range constLabel.FindAllStringSubmatch(m[3], -1) {
		labels = append(labels, pair[1])
	}
	if m[3] != "" && len(labels) == 0 {
		return Family{}, errors.New("metric description " + d.String() + ": cannot read its constant labels")
	}
	for _, l := range splitNonEmpty(m[4]) {
		// Constrained labels are shown as c(name).
		if inner, ok := strings.CutPrefix(l, "c("); ok {
			l = strings.TrimSuffix(inner, ")")
		}
		labels = append(labels, l)
	}
	sort.Strings(labels)
	return Family{Name: name, Help: help, Kind: Unknown, Labels: labels}, nil
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// fromDTO reads a gathered family: its type, and the label names of its
// series.
func fromDTO(mf *dto.MetricFamily) Family {
	f := Family{Name: mf.GetName(), Help: mf.GetHelp(), Kind: Unknown}
	switch mf.GetType() {
	case dto.MetricType_COUNTER:
		f.Kind = Counter
	case dto.MetricType_GAUGE:
		f.Kind = Gauge
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		f.Kind = Histogram
	case dto.MetricType_SUMMARY:
		f.Kind = Summary
	}
	seen := map[string]bool{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if !seen[l.GetName()] {
				seen[l.GetName()] = true
				f.Labels = append(f.Labels, l.GetName())
			}
		}
	}
	sort.Strings(f.Labels)
	return f
}
