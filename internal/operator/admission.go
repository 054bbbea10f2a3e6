package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/drastack/drastack/internal/admissionpolicy"
)

// Values of Options.AdmissionPolicies.
const (
	// AdmissionPoliciesInstall applies the admission policies at start and
	// starts no controller before the API server enforces them.
	AdmissionPoliciesInstall = "install"
	// AdmissionPoliciesOff skips them: for an operator run from a
	// developer's machine with their own credentials, which the fence
	// would otherwise restrict.
	AdmissionPoliciesOff = "off"
)

// policyGate holds back everything in the manager that writes until the
// admission policies are in force. controller-runtime starts a manager's
// runnables in groups: HTTP servers (health probes, metrics), webhook
// servers, caches, then the others and, once elected, the controllers; it
// waits for every cache of the caches group to sync before it starts the
// next groups. The gate joins that group as a cache, the manager's own,
// whose sync it reports only after the policies are in force. So the
// probes and the webhooks serve at once (they write nothing), the
// informers fill meanwhile, and the CA injector and every controller start
// after the gate.
type policyGate struct {
	cache.Cache
	installer *admissionpolicy.Installer
	whoAmI    func(ctx context.Context) (string, error)
	done      chan struct{}
}

var _ manager.Runnable = (*policyGate)(nil)

func newPolicyGate(mgr manager.Manager, cs kubernetes.Interface, direct client.Client) *policyGate {
	instance, _ := os.Hostname()
	return &policyGate{
		Cache:     mgr.GetCache(),
		installer: &admissionpolicy.Installer{Client: direct, Instance: instance},
		whoAmI: func(ctx context.Context) (string, error) {
			r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return "", fmt.Errorf("ask the API server who the operator is (SelfSubjectReview): %w", err)
			}
			return r.Status.UserInfo.Username, nil
		},
		done: make(chan struct{}),
	}
}

// GetCache makes the manager put the gate in its caches group.
func (g *policyGate) GetCache() cache.Cache { return g }

// WaitForCacheSync reports the manager's cache synced only once the
// policies are in force.
func (g *policyGate) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-g.done:
		return g.Cache.WaitForCacheSync(ctx)
	case <-ctx.Done():
		return false
	}
}

// Start renders the policies for the operator's own identity, as the API
// server names it, and installs them. An identity that is not a
// ServiceAccount is an error: the fence would restrict a person.
func (g *policyGate) Start(ctx context.Context) error {
	user, err := g.whoAmI(ctx)
	if err != nil {
		return err
	}
	id, err := admissionpolicy.IdentityFromUsername(user)
	if err != nil {
		return fmt.Errorf("%w; run the operator under its ServiceAccount, or with --admission-policies=%s to develop without them", err, AdmissionPoliciesOff)
	}
	g.installer.Identity = id
	log.FromContext(ctx).Info("Installing the admission policies before any controller starts", "identity", user)
	if err := g.installer.Install(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	close(g.done)
	return nil
}

// ready is the readiness check of the gate.
func (g *policyGate) ready(*http.Request) error {
	if !g.installer.InForce() {
		return errors.New("the admission policies are not in force yet")
	}
	return nil
}

var _ healthz.Checker = (*policyGate)(nil).ready
