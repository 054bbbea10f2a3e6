//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	v1alpha1 "github.com/drastack/drastack/api/v1alpha1"
	driverctrl "github.com/drastack/drastack/internal/controller/driver"
	"github.com/drastack/drastack/internal/controller/publisher"
	"github.com/drastack/drastack/test/cluster"
	"github.com/drastack/drastack/test/specfuzz"
)

// Spec fuzz settings: how many edits and from which seed. make test runs
// the default (a fixed seed, so a failure is reproducible and the run the
// same every time); make test-spec-fuzz runs many more from a new seed.
const (
	fuzzEditsEnv   = "DRASTACK_SPEC_FUZZ_EDITS"
	fuzzSeedEnv    = "DRASTACK_SPEC_FUZZ_SEED"
	fuzzEdits      = 300
	fuzzSeed       = 22
	fuzzPoll       = 50 * time.Millisecond
	fuzzForeignNS  = "fuzz-someone-elses"
	fuzzPod        = "fuzz-pod"
	fuzzTemplate   = "fuzz-gpu"
	fuzzEditBudget = 3 * time.Minute
)

func envInt(t *testing.T, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// fuzzBase is the DRAStack sample of config/samples fitted to the suite's
// nodes: its example driver on the GPU nodes, its multi-host entry on the
// TPU hosts, its central entries.
func fuzzBase(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("../../config/samples/drastack_v1alpha1_drastack.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base, err := specfuzz.LoadSample(data, map[string]string{
		"gpu.example.com":             sgGPU,
		"tpu.sim.drastack.io":         sgTPU,
		"type: kwok":                  sgGPULabel + `: "true"`,
		"demo.drastack.io/tpu-domain": sgDomain,
		"demo.drastack.io/tpu-coords": sgCoords,
		"demo.drastack.io/tpu":        sgTPULabel,
		"drastack-drivers":            sgDriverNS,
	})
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// fuzzWrite replaces the spec with raw JSON values, as kubectl would
// send them, and returns the generation, or admission's refusal.
func fuzzWrite(ctx context.Context, crc client.Client, spec map[string]any) (int64, error) {
	var gen int64
	var refused error
	err := wait.PollUntilContextTimeout(ctx, fuzzPoll, sgTimeout, true, func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("DRAStack"))
		if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, u); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		u.Object["spec"] = spec
		err := crc.Update(ctx, u)
		switch {
		case err == nil:
			gen = u.GetGeneration()
			return true, nil
		case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
			refused = err
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return 0, err
	}
	return gen, refused
}

// fuzzJudged waits until generation gen is judged and returns whether the
// spec was held (SpecValid False and the driver controller holding) and
// the SpecValid message. A valid spec also waits for the driver
// controller's report of gen.
func fuzzJudged(ctx context.Context, t *testing.T, crc client.Client, gen int64) (bool, string) {
	t.Helper()
	var held bool
	var msg string
	err := wait.PollUntilContextTimeout(ctx, fuzzPoll, sgTimeout, true, func(ctx context.Context) (bool, error) {
		var st v1alpha1.DRAStack
		if err := crc.Get(ctx, types.NamespacedName{Name: v1alpha1.DRAStackName}, &st); err != nil {
			return false, nil //nolint:nilerr // retried
		}
		v := sgCondition(&st, v1alpha1.ConditionSpecValid)
		p := sgCondition(&st, v1alpha1.ConditionProgressing)
		r := sgCondition(&st, v1alpha1.ConditionDriversReady)
		pub := sgCondition(&st, publisher.ConditionPublished)
		if v == nil || v.ObservedGeneration != gen || pub == nil || pub.ObservedGeneration != gen {
			return false, nil
		}
		msg = v.Message
		if p != nil && p.ObservedGeneration == gen && p.Reason == driverctrl.ReasonSpecInvalid && pub.Reason == publisher.ReasonSpecInvalid {
			held = true
			return true, nil
		}
		// Judged as valid by the driver controller and the publisher too
		// (a spec without drivers has no DriversReady to wait for; the
		// publisher is done when no driver that left is still retiring).
		return pub.Reason == publisher.ReasonPublished && (len(st.Spec.Drivers) == 0 || (r != nil && r.ObservedGeneration == gen)), nil
	})
	if err != nil {
		t.Fatalf("generation %d not judged: %v", gen, err)
	}
	return held, msg
}

// fuzzNothingTwice fails when a device is allocated to two claims.
func fuzzNothingTwice(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	claims, err := c.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder := map[string]string{}
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			key := r.Driver + "/" + r.Pool + "/" + r.Device
			if r.ShareID != nil {
				continue // consumable capacity: several claims by design
			}
			who := cl.Namespace + "/" + cl.Name
			if prev, ok := holder[key]; ok && prev != who {
				t.Errorf("device %s is allocated to %s and %s", key, prev, who)
			}
			holder[key] = who
		}
	}
}

// claimsOf keeps the claims of a fingerprint.
func claimsOf(fp fingerprint) fingerprint {
	out := fingerprint{}
	for k, v := range fp {
		if strings.HasPrefix(k, "ResourceClaim ") {
			out[k] = v
		}
	}
	return out
}

// TestSpecFuzz applies random DRAStack edits (specfuzz: generated from
// the CRD's schema, and mutations of the sample) to a working stack, each
// followed by its revert. An edit admission refuses changes nothing; an
// edit the operator holds (SpecValid False) changes nothing that runs, by
// identity, through the edit and its revert; any edit leaves every
// allocation as it was, and after its revert what runs is back as it was.
// No device is ever allocated twice.
func TestSpecFuzz(t *testing.T) {
	feature := features.New("spec fuzz: random edits and their reverts change only what they ask for").
		Setup(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			s := sgStart(ctx, t, c)
			// The sample instead of the guard suite's spec, and a pod whose
			// claim kube-scheduler allocates, besides the held claims.
			if _, err := fuzzWrite(ctx, s.crc, fuzzBase(t)); err != nil {
				t.Fatalf("the sample is refused: %v", err)
			}
			if _, err := c.Client.ResourceV1().ResourceClaimTemplates(sgNamespace).Create(ctx, drvClaimTemplate(sgNamespace, fuzzTemplate, sgGPU), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Client.CoreV1().Pods(sgNamespace).Create(ctx, claimPod(sgNamespace, fuzzPod, fuzzTemplate), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitPodRunning(ctx, t, c, sgNamespace, fuzzPod)
			createNamespace(ctx, t, c.Client, fuzzForeignNS)
			return context.WithValue(ctx, sgKey{}, s)
		}).
		Assess("edits and reverts", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			s, c := sgFrom(ctx, t), mustCluster(ctx, t)
			crdYAML, err := os.ReadFile("../../config/crd/bases/drastack.io_drastacks.yaml")
			if err != nil {
				t.Fatal(err)
			}
			schema, err := specfuzz.LoadSchema(crdYAML)
			if err != nil {
				t.Fatal(err)
			}
			base := fuzzBase(t)
			edits, seed := envInt(t, fuzzEditsEnv, fuzzEdits), envInt(t, fuzzSeedEnv, fuzzSeed)
			t.Logf("%d edits from seed %d (%s, %s)", edits, seed, fuzzEditsEnv, fuzzSeedEnv)
			gen := specfuzz.New(seed, schema, base, specfuzz.Vocabulary{
				Drivers:    []string{sgGPU, sgTPU, "gpu.nvidia.com", "compute-domain.nvidia.com", "nosuch.fuzz.e2e.drastack.io"},
				Namespaces: []string{sgDriverNS, "drastack-system", "kube-system", "default", fuzzForeignNS},
				Labels:     map[string]string{sgGPULabel: "true", sgTPULabel: "true", sgDomain: "a", sgCoords: "0.0"},
				Pools:      []string{"tpu-a", sgGPUNodes[0], "nosuch"},
				Images:     []string{"registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.1", "Registry/UPPER::v1", "r.io/d@sha256:abc"},
			})

			baseGen, err := fuzzWrite(ctx, s.crc, base)
			if err != nil {
				t.Fatal(err)
			}
			fuzzJudged(ctx, t, s.crc, baseGen)
			content := sgFingerprint(ctx, t, c, false)
			if len(claimsOf(content)) < 3 {
				t.Fatalf("the working stack lacks its claims: %v", claimsOf(content))
			}
			stats := map[string]int{}
			begin := time.Now()
			for i := int64(0); i < edits && !t.Failed(); i++ {
				e := gen.Next()
				identity := sgFingerprint(ctx, t, c, true)
				start := time.Now()
				g, refused := fuzzWrite(ctx, s.crc, e.Spec)
				if refused != nil {
					stats["refused at admission"]++
					continue
				}
				held, msg := fuzzJudged(ctx, t, s.crc, g)
				now := sgFingerprint(ctx, t, c, true)
				if held {
					stats["held (SpecValid False)"]++
					if d := identity.diff(now); d != "" {
						t.Errorf("edit %d (%s) was held (%s) but changed what runs:\n%s", i, e.What, msg, d)
					}
				} else {
					stats["acted on"]++
				}
				if d := claimsOf(content).diff(claimsOf(sgFingerprint(ctx, t, c, false))); d != "" {
					t.Errorf("edit %d (%s) changed allocations:\n%s", i, e.What, d)
				}
				fuzzNothingTwice(ctx, t, c)

				rg, err := fuzzWrite(ctx, s.crc, base)
				if err != nil {
					t.Fatalf("revert of edit %d (%s): %v", i, e.What, err)
				}
				fuzzJudged(ctx, t, s.crc, rg)
				sgWaitContent(ctx, t, c, content, fmt.Sprintf("edit %d (%s) and its revert", i, e.What))
				if held {
					if d := identity.diff(sgFingerprint(ctx, t, c, true)); d != "" {
						t.Errorf("edit %d (%s) was held, and with its revert it changed what runs:\n%s", i, e.What, d)
					}
				}
				fuzzNothingTwice(ctx, t, c)
				if took := time.Since(start); took > fuzzEditBudget {
					t.Errorf("edit %d (%s) and its revert took %s", i, e.What, took)
				}
			}
			t.Logf("%d edits in %s (shared machine): %v", edits, since(begin), stats)
			if stats["held (SpecValid False)"] == 0 || stats["acted on"] == 0 || stats["refused at admission"] == 0 {
				t.Errorf("the edits did not reach every outcome: %v", stats)
			}
			pod, err := c.Client.CoreV1().Pods(sgNamespace).Get(ctx, fuzzPod, metav1.GetOptions{})
			if err != nil || pod.Status.Phase != corev1.PodRunning {
				t.Errorf("the workload pod is not running any more: %v", err)
			}
			return ctx
		}).
		Teardown(func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := mustCluster(ctx, t)
			_ = c.Client.CoreV1().Pods(sgNamespace).Delete(ctx, fuzzPod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			s, _ := ctx.Value(sgKey{}).(*sgState)
			sgStop(ctx, t, c, s)
			sgDeleteNamespace(ctx, t, c, fuzzForeignNS)
			return ctx
		}).
		Feature()
	testenv.Test(t, feature)
}
