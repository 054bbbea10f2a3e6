package admissionpolicy

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// fakeServer plays the API server for the Installer: it records the applies
// and refuses the probe Event once the probe binding of that hash has been
// applied and `lag` more probes have come (the policy informer's delay).
type fakeServer struct {
	mu        sync.Mutex
	applied   []string // kind/name in order
	owners    map[string][]metav1.OwnerReference
	probeHash string
	lag       int
	probes    int
	failApply int // applies to fail first
	crdUID    types.UID
}

func (s *fakeServer) client(t *testing.T) client.Client {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name != StackCRD {
				return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
			}
			if s.crdUID == "" {
				return apierrors.NewNotFound(schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, key.Name)
			}
			obj.SetName(key.Name)
			obj.SetUID(s.crdUID)
			return nil
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.failApply > 0 {
				s.failApply--
				return errors.New("connection reset")
			}
			u, ok := obj.(interface {
				GetName() string
				GetKind() string
				GetOwnerReferences() []metav1.OwnerReference
			})
			if !ok {
				return errors.New("not an unstructured apply configuration")
			}
			kind, name := u.GetKind(), u.GetName()
			s.applied = append(s.applied, kind+"/"+name)
			if s.owners == nil {
				s.owners = map[string][]metav1.OwnerReference{}
			}
			s.owners[kind+"/"+name] = u.GetOwnerReferences()
			if kind == "ValidatingAdmissionPolicyBinding" && name == Probe {
				s.probeHash = "pending"
			}
			return nil
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			ev, ok := obj.(*eventsv1.Event)
			if !ok {
				return errors.New("unexpected create")
			}
			co := &client.CreateOptions{}
			co.ApplyOptions(opts)
			if len(co.DryRun) == 0 {
				return errors.New("the probe must be a dry run")
			}
			if s.probeHash == "" {
				return nil
			}
			s.probes++
			if s.probes <= s.lag {
				return nil
			}
			hash := ev.Name[len(Probe)+1:]
			return &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid,
				Message: "events.events.k8s.io \"" + ev.Name + "\" is forbidden: ValidatingAdmissionPolicy '" + Probe + "' with binding '" + Probe + "' denied request: " + probeMessage(hash),
			}}
		},
	})
}

func TestInstallerAppliesPoliciesThenBindingsThenTheProbe(t *testing.T) {
	s := &fakeServer{lag: 3, crdUID: "crd-uid", failApply: 2}
	in := &Installer{Client: s.client(t), Identity: DefaultIdentity, Instance: "pod-1", ProbeInterval: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if in.InForce() {
		t.Fatal("in force before Install")
	}
	if err := in.Install(ctx); err != nil {
		t.Fatal(err)
	}
	if !in.InForce() {
		t.Fatal("Install returned but InForce is false")
	}
	pairs := Set(DefaultIdentity)
	var want []string
	for _, p := range pairs {
		want = append(want, "ValidatingAdmissionPolicy/"+p.Policy.Name)
	}
	for _, p := range pairs {
		want = append(want, "ValidatingAdmissionPolicyBinding/"+p.Binding.Name)
	}
	want = append(want, "ValidatingAdmissionPolicy/"+Probe, "ValidatingAdmissionPolicyBinding/"+Probe)
	if !slices.Equal(s.applied, want) {
		t.Errorf("applied\n%v\nwant\n%v", s.applied, want)
	}
	for _, p := range pairs {
		refs := s.owners["ValidatingAdmissionPolicy/"+p.Policy.Name]
		owned := len(refs) == 1 && refs[0].UID == "crd-uid" && refs[0].Name == StackCRD
		if parameterized := p.Policy.Spec.ParamKind != nil; owned != parameterized {
			t.Errorf("policy %s: owner references %v; want the DRAStack CRD exactly when it reads the DRAStack", p.Policy.Name, refs)
		}
	}
	if s.probes != s.lag+1 {
		t.Errorf("probed %d times, want %d (until the API server refused the probe)", s.probes, s.lag+1)
	}
}

func TestInstallerWaitsForTheCRD(t *testing.T) {
	s := &fakeServer{}
	in := &Installer{Client: s.client(t), Identity: DefaultIdentity, ProbeInterval: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := in.Install(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Install without the DRAStack CRD: %v, want the context's deadline", err)
	}
	if in.InForce() || len(s.applied) > 0 {
		t.Errorf("applied %v without the CRD that owns the parameterized policies", s.applied)
	}
}

func TestInstallerReappliesWhenTheProbeNeverComes(t *testing.T) {
	s := &fakeServer{lag: 1 << 30, crdUID: "u"}
	in := &Installer{Client: s.client(t), Identity: DefaultIdentity, ProbeInterval: time.Millisecond, ReapplyAfter: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := in.Install(ctx); err == nil {
		t.Fatal("Install returned nil although the probe was never refused")
	}
	n := 2 * (len(Set(DefaultIdentity)) + 1)
	if len(s.applied) < 2*n {
		t.Errorf("applied %d objects, want the set applied again after ReapplyAfter (at least %d)", len(s.applied), 2*n)
	}
	if in.InForce() {
		t.Error("InForce without a refused probe")
	}
}
