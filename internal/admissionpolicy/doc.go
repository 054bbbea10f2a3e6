// Package admissionpolicy renders drastack's ValidatingAdmissionPolicies and
// installs them before the operator acts.
//
// The policies are evaluated by the API server itself, so they hold even
// when the operator is down, buggy or compromised. They come in two groups:
//
//   - the fence (Fence): policies that match only requests of the
//     operator's own identity and narrow what its RBAC allows to what its
//     code does: pod patches that only lift its scheduling gate, writes only
//     to objects carrying its ownership labels, role bindings only after the
//     driver profiles' convention, no use of permissions it holds only to
//     grant them to drivers, and so on;
//   - the partition (Partition): policies for everyone else that keep
//     kube-scheduler and tenants out of the operator's devices: nobody but
//     the operator writes its DeviceTaintRules, no claim tolerates the
//     central taint, and a claim that asks for the operator's allocation
//     (CEL constraints, the Immediate label) names only central classes.
//
// config/admission ships the same objects as manifests for `make deploy`
// (hack/admissionpolicies renders them). OLM bundles cannot carry
// ValidatingAdmissionPolicies, so the operator also applies them itself at
// every start (Installer) and starts no controller before the API server
// enforces them: it writes a probe policy and binding last, both carrying a
// hash of the set, and waits until the API server refuses the dry-run
// request only that probe refuses. The API server's policy and binding
// informers see objects in the order they were written, so the probe in
// force means every policy and binding written before it is in force too,
// on that API server.
//
// Everything but Installer is pure: it builds objects from an Identity.
package admissionpolicy
