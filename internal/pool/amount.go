package pool

import (
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
)

// maxAmount caps one scaled counter value. 2^48 units is far above any real
// counter (256 TiB counted in bytes) and leaves room to add 2^15 such values
// to an int64 without overflow, so the hot path needs no overflow checks.
const maxAmount int64 = 1 << 48

var maxMilli = resource.NewMilliQuantity(math.MaxInt64, resource.DecimalSI)

// integral reports whether q is a whole number that fits int64. Counter
// slots whose values are all integral are kept in units, others in
// thousandths.
func integral(q resource.Quantity) bool {
	_, ok := q.AsInt64()
	return ok
}

// scaledAmount converts q to an int64 in units (milli=false) or thousandths
// (milli=true). Values finer than a thousandth are rounded down for
// capacities and up for consumption (roundUp), so the fast path never
// allows what exact arithmetic would refuse. Negative values count as zero
// (the API server rejects them). Values are capped at maxAmount.
func scaledAmount(q resource.Quantity, milli, roundUp bool) int64 {
	if q.Sign() <= 0 {
		return 0
	}
	var v int64
	if !milli {
		n, ok := q.AsInt64()
		if !ok {
			return maxAmount
		}
		v = n
	} else {
		if q.Cmp(*maxMilli) >= 0 {
			return maxAmount
		}
		v = q.MilliValue() // rounds up
		if !roundUp && resource.NewMilliQuantity(v, resource.DecimalSI).Cmp(q) != 0 {
			v--
		}
	}
	return min(v, maxAmount)
}
