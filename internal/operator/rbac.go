package operator

// RBAC of the manager itself (the controllers' rules are next to their
// code). Leader election (Options.LeaderElect, --leader-elect, on in the
// Deployment): controller-runtime's lease lock reads and renews the lease
// drastack.drastack.io in the operator's namespace (get, update: by name)
// and creates it the first time (a create cannot be limited by name), and
// its event recorder reports the new leader with a core/v1 Event there.
// Held for leader election only; the e2e suites run one replica without it.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update,resourceNames=drastack.drastack.io,namespace=system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create,namespace=system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=system
