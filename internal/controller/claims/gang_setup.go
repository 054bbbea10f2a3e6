package claims

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/drastack/drastack/internal/gang"
)

// detectGangs finds out whether the cluster serves the Workload API's
// PodGroups (scheduling.k8s.io/v1beta1, Kubernetes 1.37 with the
// GenericWorkload gate and the API version turned on): pods name their
// gang there; elsewhere only the drastack label makes gangs.
func (r *Reconciler) detectGangs(mapper meta.RESTMapper, logger logr.Logger) error {
	gv := schedulingv1beta1.SchemeGroupVersion
	_, err := mapper.RESTMapping(gv.WithKind("PodGroup").GroupKind(), gv.Version)
	switch {
	case err == nil:
		r.gangs.podGroups = true
	case meta.IsNoMatchError(err):
		logger.Info("scheduling.k8s.io/v1beta1 PodGroup is not served (Workload API off); gangs are made with the label " + gang.LabelName + " only")
	default:
		return fmt.Errorf("look up PodGroup in the API server: %w", err)
	}
	return nil
}

// watchGangs queues the pods of a PodGroup when it appears, changes or
// goes: a pod waits for its PodGroup, and the PodGroup decides its gang.
func (r *Reconciler) watchGangs(bld *ctrl.Builder, c cache.Cache) *ctrl.Builder {
	if !r.gangs.podGroups {
		return bld
	}
	pods := func(ctx context.Context, pg *schedulingv1beta1.PodGroup, q queue) {
		var list corev1.PodList
		if err := r.podCache.List(ctx, &list, client.InNamespace(pg.Namespace), client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "Listing the pods of a PodGroup failed", "podGroup", klogKey(pg))
			return
		}
		for i := range list.Items {
			p := &list.Items[i]
			if name, ok := gang.PodGroupName(p); ok && name == pg.Name && p.Spec.NodeName == "" && len(p.Spec.ResourceClaims) > 0 {
				q.Add(request(p))
			}
		}
	}
	return bld.WatchesRawSource(source.TypedKind(c, &schedulingv1beta1.PodGroup{}, handler.TypedFuncs[*schedulingv1beta1.PodGroup, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*schedulingv1beta1.PodGroup], q queue) {
			pods(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*schedulingv1beta1.PodGroup], q queue) {
			if e.ObjectOld.Generation != e.ObjectNew.Generation {
				pods(ctx, e.ObjectNew, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*schedulingv1beta1.PodGroup], q queue) {
			pods(ctx, e.Object, q)
		},
	}))
}
