// Package cluster starts and stops a real Kubernetes control plane on the
// loopback interface for tests and the demo: etcd and kube-apiserver through
// controller-runtime's envtest, then kube-scheduler, kube-controller-manager
// and kwok as child processes, with the DRA feature gates on and kwok fake
// nodes whose pods reach Running.
//
// The binaries are built once per machine by hack/build-k8s.sh; this package
// never downloads or builds anything. Every component writes its log to a
// file, and a component that fails to start is reported with the tail of its
// log so that a broken cluster explains itself.
package cluster
