package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	poolpkg "github.com/drastack/drastack/internal/pool"
)

// Annotations on every DevicePool name the pool it reports. Names are
// derived from (driver, pool) but cannot always be turned back into them
// (sanitising and hashing lose information), so the controller reads these
// to find the pool of a DevicePool it did not create in this process.
const (
	AnnotationDriver = "drastack.io/driver"
	AnnotationPool   = "drastack.io/pool"
)

// LabelDriver is set to the driver name when it is a valid label value (a
// driver name is a DNS subdomain of at most 63 characters, so it always
// is), so that `kubectl get pool -l drastack.io/driver=gpu.example.com`
// works.
const LabelDriver = "drastack.io/driver"

// maxNameLength is the longest DNS-1123 subdomain, the rule for the names
// of cluster-scoped custom resources.
const maxNameLength = validation.DNS1123SubdomainMaxLength

// hashLength is how many hex digits of SHA-256 a hashed name ends with: 40
// bits, so that even a cluster with every one of 10,000 pools hashed has a
// collision probability of about 1 in 20,000, and only pools whose
// sanitised prefixes also agree can collide at all.
const hashLength = 10

// Name is the DevicePool name of a pool: "<driver>-<pool>" when that is
// already a valid object name, as in `gpu.example.com-node-1`; otherwise
// the sanitised form shortened to fit, with a hash of the real names
// appended (see HashedName). Changing the input in any way that
// sanitising hides ("Node/1" versus "node.1") therefore changes the name.
//
// "<driver>-<pool>" is not injective ("a-b" + "c" and "a" + "b-c" give the
// same string), so the controller falls back to HashedName when the plain
// name is already taken by another pool; see Reconciler.
func Name(id poolpkg.ID) string {
	plain := id.Driver + "-" + id.Pool
	if len(plain) <= maxNameLength && sanitize(plain) == plain && len(validation.IsDNS1123Subdomain(plain)) == 0 {
		return plain
	}
	return HashedName(id)
}

// HashedName is "<sanitised driver-pool, shortened>-<hash>": always a
// valid DNS-1123 subdomain of at most 253 characters, readable from its
// prefix, and distinct for distinct (driver, pool) up to the hash.
func HashedName(id poolpkg.ID) string {
	// A NUL byte cannot occur in either name, so the hashed input is
	// unambiguous.
	sum := sha256.Sum256([]byte(id.Driver + "\x00" + id.Pool))
	hash := hex.EncodeToString(sum[:])[:hashLength]
	prefix := sanitize(id.Driver + "-" + id.Pool)
	if limit := maxNameLength - 1 - hashLength; len(prefix) > limit {
		prefix = prefix[:limit]
	}
	prefix = strings.TrimRight(prefix, "-.")
	if prefix == "" {
		return "pool-" + hash
	}
	return prefix + "-" + hash
}

// sanitize maps s onto the DNS-1123 subdomain alphabet: lower case, "/"
// (the separator of pool name segments) becomes ".", anything else outside
// [a-z0-9.-] becomes "-", and every dot-separated label is trimmed of
// leading and trailing "-" with empty labels dropped.
func sanitize(s string) string {
	mapped := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		case r == '/':
			return '.'
		default:
			return '-'
		}
	}, s)
	labels := strings.Split(mapped, ".")
	kept := labels[:0]
	for _, l := range labels {
		if l = strings.Trim(l, "-"); l != "" {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, ".")
}

// idOf returns the pool a DevicePool reports, from its annotations, and
// false when they are missing (an object this controller did not write).
func idOf(annotations map[string]string) (poolpkg.ID, bool) {
	id := poolpkg.ID{Driver: annotations[AnnotationDriver], Pool: annotations[AnnotationPool]}
	return id, id.Driver != "" && id.Pool != ""
}
