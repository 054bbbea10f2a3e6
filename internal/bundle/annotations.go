package bundle

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Keys of bundle/metadata/annotations.yaml, as OLM and operator-sdk use them.
const (
	keyMediaType      = "operators.operatorframework.io.bundle.mediatype.v1"
	keyManifests      = "operators.operatorframework.io.bundle.manifests.v1"
	keyMetadata       = "operators.operatorframework.io.bundle.metadata.v1"
	keyPackage        = "operators.operatorframework.io.bundle.package.v1"
	keyChannels       = "operators.operatorframework.io.bundle.channels.v1"
	keyDefaultChannel = "operators.operatorframework.io.bundle.channel.default.v1"
	keyMetricsBuilder = "operators.operatorframework.io.metrics.builder"
	keyMetricsMedia   = "operators.operatorframework.io.metrics.mediatype.v1"
	keyMetricsLayout  = "operators.operatorframework.io.metrics.project_layout"
)

// Directories of the bundle, relative to the output root.
const (
	manifestsDir = "bundle/manifests"
	metadataDir  = "bundle/metadata"
)

// requiredAnnotationKeys are the keys every bundle this generator writes
// has; the structure test checks the committed bundle against them.
var requiredAnnotationKeys = []string{
	keyMediaType, keyManifests, keyMetadata, keyPackage, keyChannels,
	keyDefaultChannel, keyMetricsBuilder, keyMetricsMedia, keyMetricsLayout,
}

// bundleAnnotations returns the bundle's metadata annotations. The builder
// and project layout come from the base CSV's annotations, so the two
// places cannot disagree.
func bundleAnnotations(csv *unstructured.Unstructured, opts Options) (map[string]string, error) {
	csvAnnotations := csv.GetAnnotations()
	builder, layout := csvAnnotations[annotationBuilder], csvAnnotations[annotationLayout]
	if builder == "" || layout == "" {
		return nil, fmt.Errorf("base CSV must set the %s and %s annotations", annotationBuilder, annotationLayout)
	}
	return map[string]string{
		keyMediaType:      "registry+v1",
		keyManifests:      "manifests/",
		keyMetadata:       "metadata/",
		keyPackage:        opts.Package,
		keyChannels:       strings.Join(opts.Channels, ","),
		keyDefaultChannel: opts.defaultChannel(),
		keyMetricsBuilder: builder,
		keyMetricsMedia:   "metrics+v1",
		keyMetricsLayout:  layout,
	}, nil
}
