package webhookcert

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Injector timing.
const (
	// injectRetry is how soon a failed injection is retried.
	injectRetry = time.Second
	// defaultInjectInterval is how often the caBundle is checked again
	// once set: a `kubectl apply` or `kubectl replace` of config/default
	// may reset it, and the webhook would silently stop gating pods.
	defaultInjectInterval = 5 * time.Minute
	// maxOtherCAs is how many CAs of other replicas (or of the replica this
	// one replaces in a rollout) stay trusted next to this one's: each
	// replica makes its own CA at start and the Service sends calls to any
	// of them.
	maxOtherCAs = 3
)

// CABundleInjector makes the API server trust the operator's self-signed
// certificate through the MutatingWebhookConfiguration that config/default
// installs (`make deploy`, no OLM and no certificate mounted): it patches
// the caBundle of the operator's webhooks (the pod gate and the claim
// finalizer) in that one configuration, and nothing else of it. It runs on
// every replica (each serves the webhook with its own CA), keeps the CAs of
// up to maxOtherCAs other replicas, and checks again every Interval.
type CABundleInjector struct {
	// Client patches the configuration; APIReader reads it (the operator
	// does not cache webhook configurations, and its RBAC allows get and
	// patch of this one object only).
	Client    client.Client
	APIReader client.Reader
	// ConfigName is the MutatingWebhookConfiguration to patch.
	ConfigName string
	// Webhooks names the webhooks of the configuration whose caBundle is
	// set; the first must be present, the others may be missing (a
	// configuration from before they existed).
	Webhooks []string
	// CABundle is this replica's PEM CA certificate.
	CABundle []byte
	// Interval between checks once injected; default 5 minutes.
	Interval time.Duration
	// Watch, when set, opens a watch on the configuration: any change to
	// it (a `kubectl apply` that reset the caBundle, a re-creation) is
	// checked at once rather than at the next Interval.
	Watch func(ctx context.Context) (watch.Interface, error)

	// injected: the last check found this replica's CA in the caBundle
	// of every webhook (written then or before).
	injected atomic.Bool
}

// Injected reports whether the last check found this replica's CA in the
// caBundle of the operator's webhooks: until then the API server cannot
// call this replica, so it is not ready (a Service would send it calls
// that fail, and failurePolicy Ignore would let their pods through
// ungated).
func (i *CABundleInjector) Injected() bool { return i.injected.Load() }

// WatchConfiguration returns a Watch for CABundleInjector: the one
// configuration named, by a metadata.name field selector, which the
// operator's RBAC (list and watch of that resource name) allows.
func WatchConfiguration(cs kubernetes.Interface, name string) func(ctx context.Context) (watch.Interface, error) {
	return func(ctx context.Context) (watch.Interface, error) {
		return cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	}
}

// NeedLeaderElection is false: every replica serves the webhook.
func (i *CABundleInjector) NeedLeaderElection() bool { return false }

// Start injects the CA, retrying every second until it succeeds, then
// checks again every Interval until ctx ends.
func (i *CABundleInjector) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithValues("configuration", i.ConfigName)
	interval := i.Interval
	if interval <= 0 {
		interval = defaultInjectInterval
	}
	changes := i.changes(ctx)
	failing := false
	for {
		changed, err := i.Inject(ctx)
		i.injected.Store(err == nil)
		wait := interval
		switch {
		case err != nil:
			if !failing {
				logger.Error(err, "Setting the pod webhook's caBundle failed; retrying")
			}
			failing, wait = true, injectRetry
		case changed || failing:
			failing = false
			logger.Info("Set the pod webhook's caBundle")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		case <-changes:
		}
	}
}

// changes signals every change of the configuration that Watch reports
// (never, without Watch). A watch that ends or fails is opened again
// after injectRetry; a signal not yet taken stands for all since.
func (i *CABundleInjector) changes(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	if i.Watch == nil {
		return out
	}
	logger := log.FromContext(ctx).WithValues("configuration", i.ConfigName)
	go func() {
		for ctx.Err() == nil {
			w, err := i.Watch(ctx)
			if err != nil {
				logger.V(1).Info("Watching the pod webhook's configuration failed; the caBundle is still checked every interval", "err", err)
			} else {
				for range w.ResultChan() {
					select {
					case out <- struct{}{}:
					default:
					}
				}
				w.Stop()
			}
			select {
			case <-ctx.Done():
			case <-time.After(injectRetry):
			}
		}
	}()
	return out
}

// Inject adds this replica's CA to the caBundle of each of the operator's
// webhooks (Webhooks) in the configuration that does not hold it
// already, and reports whether it wrote. The first webhook must be there;
// the others may be missing (a configuration from before they existed).
// The patch names each webhook by index and tests its name and the
// resourceVersion, so it never writes another webhook or a configuration
// it did not read.
func (i *CABundleInjector) Inject(ctx context.Context) (bool, error) {
	if len(i.Webhooks) == 0 {
		return false, fmt.Errorf("no webhook names to set the caBundle of in MutatingWebhookConfiguration %s", i.ConfigName)
	}
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := i.APIReader.Get(ctx, client.ObjectKey{Name: i.ConfigName}, &cfg); err != nil {
		return false, fmt.Errorf("read MutatingWebhookConfiguration %s: %w", i.ConfigName, err)
	}
	ops := []map[string]any{{"op": "test", "path": "/metadata/resourceVersion", "value": cfg.ResourceVersion}}
	gate := false
	for n, w := range cfg.Webhooks {
		if !slices.Contains(i.Webhooks, w.Name) {
			continue
		}
		gate = gate || w.Name == i.Webhooks[0]
		current := w.ClientConfig.CABundle
		if holdsCA(current, i.CABundle) {
			// Also when other replicas' CAs come first: reordering would
			// make the replicas take turns writing.
			continue
		}
		path := "/webhooks/" + strconv.Itoa(n)
		ops = append(ops,
			map[string]any{"op": "test", "path": path + "/name", "value": w.Name},
			map[string]any{"op": "add", "path": path + "/clientConfig/caBundle", "value": mergeCABundle(current, i.CABundle, time.Now())})
	}
	if !gate {
		return false, fmt.Errorf("MutatingWebhookConfiguration %s has no webhook %s", i.ConfigName, i.Webhooks[0])
	}
	if len(ops) == 1 {
		return false, nil
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return false, fmt.Errorf("encode caBundle patch: %w", err)
	}
	if err := i.Client.Patch(ctx, &cfg, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return false, fmt.Errorf("patch the caBundle of MutatingWebhookConfiguration %s: %w", i.ConfigName, err)
	}
	return true, nil
}

// holdsCA reports whether the PEM bundle holds the first certificate of ca.
func holdsCA(bundle, ca []byte) bool {
	want, _ := pem.Decode(ca)
	if want == nil {
		return false
	}
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return false
		}
		if bytes.Equal(block.Bytes, want.Bytes) {
			return true
		}
	}
}

// mergeCABundle returns ours followed by the first maxOtherCAs certificates
// of current that are not ours, parse, and have not expired at now. ours
// comes first, so the CAs of the replicas that started last are kept.
func mergeCABundle(current, ours []byte, now time.Time) []byte {
	var out bytes.Buffer
	out.Write(ours)
	oursBlock, _ := pem.Decode(ours)
	kept := 0
	for rest := current; kept < maxOtherCAs; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" || (oursBlock != nil && bytes.Equal(block.Bytes, oursBlock.Bytes)) {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil || now.After(cert.NotAfter) {
			continue
		}
		_ = pem.Encode(&out, block)
		kept++
	}
	return out.Bytes()
}
