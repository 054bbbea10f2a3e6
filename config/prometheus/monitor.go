package prometheus

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

//go:embed servicemonitor.yaml
var serviceMonitor []byte

// Endpoint is how the ServiceMonitor scrapes the operator.
type Endpoint struct {
	// Port names the metrics Service's port.
	Port string `json:"port"`
	// Scheme is http or https.
	Scheme string `json:"scheme"`
	// Path of the metrics.
	Path string `json:"path"`
	// BearerTokenFile is where Prometheus reads its ServiceAccount token.
	BearerTokenFile string `json:"bearerTokenFile"`
	// TLSConfig of the scrape.
	TLSConfig struct {
		InsecureSkipVerify bool `json:"insecureSkipVerify"`
	} `json:"tlsConfig"`
}

// Monitor is the part of the ServiceMonitor that says what is scraped.
type Monitor struct {
	// Selector is the metrics Service's labels.
	Selector map[string]string
	// Endpoint is its one endpoint.
	Endpoint Endpoint
}

// ServiceMonitor reads servicemonitor.yaml.
func ServiceMonitor() (Monitor, error) {
	var doc struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []Endpoint `json:"endpoints"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(serviceMonitor, &doc); err != nil {
		return Monitor{}, fmt.Errorf("servicemonitor.yaml: %w", err)
	}
	if doc.APIVersion != "monitoring.coreos.com/v1" || doc.Kind != "ServiceMonitor" {
		return Monitor{}, fmt.Errorf("servicemonitor.yaml: %s %s is not a monitoring.coreos.com/v1 ServiceMonitor", doc.APIVersion, doc.Kind)
	}
	if len(doc.Spec.Endpoints) != 1 || len(doc.Spec.Selector.MatchLabels) == 0 {
		return Monitor{}, fmt.Errorf("servicemonitor.yaml: want one endpoint and spec.selector.matchLabels, have %d endpoints", len(doc.Spec.Endpoints))
	}
	return Monitor{Selector: doc.Spec.Selector.MatchLabels, Endpoint: doc.Spec.Endpoints[0]}, nil
}
