package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/drastack/drastack/internal/bundle"
)

// identityKinds are the objects of config/default that make the operator's
// identity: where it runs, who it is, and what it may do. The Deployment is
// left out (the operator under test runs as a process of the test), and so
// are the CRDs (Start installs them).
var identityKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// tokenSeconds is how long the operator's token is valid: longer than any
// test run or demo session.
const tokenSeconds = 24 * 60 * 60

// OperatorIdentity is the operator as `make deploy` installs it: its
// ServiceAccount, bound to exactly the RBAC of config/rbac.
type OperatorIdentity struct {
	// Namespace is the operator's namespace (drastack-system).
	Namespace string
	// ServiceAccount is the operator's ServiceAccount name.
	ServiceAccount string
	// Username is how the API server sees the operator
	// (system:serviceaccount:NAMESPACE:NAME), checked with a
	// SelfSubjectReview.
	Username string
	// Config authenticates as the ServiceAccount with a token from the
	// TokenRequest API.
	Config *rest.Config
	// KubeconfigPath is a kubeconfig file for Config, for the manager
	// binary.
	KubeconfigPath string
}

// DeployOperatorIdentity renders deployDir (config/default) with kustomize,
// applies its Namespace, ServiceAccount and RBAC objects as the installing
// administrator would, and returns a client identity for the
// ServiceAccount. It asks the API server with a SelfSubjectReview who that
// identity is and fails unless it is exactly the ServiceAccount, so an
// operator started with it cannot be an administrator by accident.
//
// It is idempotent: a second call re-applies the objects and returns a
// fresh token.
func (c *Cluster) DeployOperatorIdentity(ctx context.Context, deployDir string) (*OperatorIdentity, error) {
	objs, err := bundle.Build(deployDir)
	if err != nil {
		return nil, err
	}
	var docs, namespaces []string
	id := &OperatorIdentity{}
	for _, o := range objs {
		if !slices.Contains(identityKinds, o.GetKind()) {
			continue
		}
		if o.GetKind() == "ServiceAccount" {
			if id.ServiceAccount != "" {
				return nil, fmt.Errorf("%s renders more than one ServiceAccount (%s/%s and %s/%s)", deployDir, id.Namespace, id.ServiceAccount, o.GetNamespace(), o.GetName())
			}
			id.Namespace, id.ServiceAccount = o.GetNamespace(), o.GetName()
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("serialize %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if o.GetKind() == "Namespace" {
			namespaces = append(namespaces, string(data))
			continue
		}
		docs = append(docs, string(data))
	}
	if id.ServiceAccount == "" {
		return nil, fmt.Errorf("%s renders no ServiceAccount", deployDir)
	}
	// Namespaces first: the API server refuses objects of a namespace its
	// admission has not seen yet.
	for i, part := range [][]string{namespaces, docs} {
		if err := c.applyDocs(ctx, fmt.Sprintf("operator-identity-%d.yaml", i), part); err != nil {
			return nil, err
		}
	}

	exp := int64(tokenSeconds)
	tr, err := c.Client.CoreV1().ServiceAccounts(id.Namespace).CreateToken(ctx, id.ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request a token for ServiceAccount %s/%s: %w", id.Namespace, id.ServiceAccount, err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	cfg.QPS, cfg.Burst = c.Config.QPS, c.Config.Burst
	id.Config = cfg

	want := "system:serviceaccount:" + id.Namespace + ":" + id.ServiceAccount
	if err := checkIdentity(ctx, cfg, want); err != nil {
		return nil, err
	}
	id.Username = want
	id.KubeconfigPath = filepath.Join(c.Dir, "operator.kubeconfig")
	if err := writeTokenKubeconfig(id.KubeconfigPath, cfg); err != nil {
		return nil, err
	}
	return id, nil
}

// checkIdentity asks the API server who cfg authenticates as and fails
// unless it is want, without the system:masters group.
func checkIdentity(ctx context.Context, cfg *rest.Config, want string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for %s: %w", want, err)
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("SelfSubjectReview as %s: %w", want, err)
	}
	u := r.Status.UserInfo
	if u.Username != want || slices.Contains(u.Groups, "system:masters") {
		return fmt.Errorf("the operator's credentials authenticate as %q (groups %v), want %q without system:masters", u.Username, u.Groups, want)
	}
	return nil
}

// writeTokenKubeconfig writes a kubeconfig for a token-authenticated
// config.
func writeTokenKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["operator"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "operator"}
	kc.CurrentContext = "operator"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write operator kubeconfig %s: %w", path, err)
	}
	return nil
}

// DeployWebhookByURL installs the MutatingWebhookConfigurations that
// deployDir (config/default) renders, as the installing administrator
// would, except that each webhook calls url+path instead of the in-cluster
// Service: the operator under test runs as a process of the test machine,
// not behind a Service. The operator itself sets the caBundle, exactly as
// it does when `make deploy` installed it. It returns the names of the
// configurations.
func (c *Cluster) DeployWebhookByURL(ctx context.Context, deployDir, url string) ([]string, error) {
	objs, err := bundle.Build(deployDir)
	if err != nil {
		return nil, err
	}
	var docs, names []string
	for _, o := range objs {
		if o.GetKind() != "MutatingWebhookConfiguration" {
			continue
		}
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for i, h := range hooks {
			hook, ok := h.(map[string]any)
			if !ok {
				continue
			}
			path, _, _ := unstructured.NestedString(hook, "clientConfig", "service", "path")
			if err := unstructured.SetNestedField(hook, map[string]any{"url": url + path}, "clientConfig"); err != nil {
				return nil, fmt.Errorf("webhook %d of %s: %w", i, o.GetName(), err)
			}
			hooks[i] = hook
		}
		if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
			return nil, fmt.Errorf("webhooks of %s: %w", o.GetName(), err)
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("serialize %s: %w", o.GetName(), err)
		}
		docs = append(docs, string(data))
		names = append(names, o.GetName())
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s renders no MutatingWebhookConfiguration", deployDir)
	}
	if err := c.applyDocs(ctx, "operator-webhook.yaml", docs); err != nil {
		return nil, err
	}
	return names, nil
}

// applyDocs writes YAML documents to a file of the cluster's folder and
// applies them server-side as the installing administrator (applyWithRetry).
func (c *Cluster) applyDocs(ctx context.Context, file string, docs []string) error {
	manifest := filepath.Join(c.Dir, file)
	if err := os.WriteFile(manifest, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", manifest, err)
	}
	return c.applyWithRetry(ctx, manifest)
}

// applyWithRetry applies a manifest server-side, trying again for a few
// seconds while the API server refuses it as NotFound (a namespace that
// admission has not caught up with).
func (c *Cluster) applyWithRetry(ctx context.Context, manifest string) error {
	var err error
	for range 20 {
		if _, err = c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "--field-manager=drastack-install", "-f", manifest); err == nil ||
			!strings.Contains(err.Error(), "NotFound") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
	return err
}
