// Package cluster starts and stops a real Kubernetes control plane on the
// loopback interface for tests and the demo: etcd and kube-apiserver through
// controller-runtime's envtest, then kube-scheduler, kube-controller-manager
// and kwok as child processes, with the DRA feature gates on and kwok fake
// nodes whose pods reach Running.
//
// With Options.RealNodes it also starts a real node (RealNode): kubelet,
// kube-proxy, containerd and runc in namespaces of their own, whose pods
// really run, from images built from files of this machine and imported
// into its containerd (no registry).
//
// The binaries are built once per machine by hack/build-k8s.sh and
// hack/build-node.sh; this package downloads nothing and builds only the
// small pause program of this module. Every component writes its log to a
// file, and a component that fails to start is reported with the tail of
// its log so that a broken cluster explains itself.
package cluster
