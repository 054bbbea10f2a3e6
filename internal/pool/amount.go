package pool

import (
	"math"
	"math/big"

	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Counter arithmetic is exact, with resource.Quantity semantics: nothing is
// rounded, capped or converted to floating point. kube-scheduler adds and
// compares Quantities; so do we, in a faster representation.
//
// Each counter of a pool gets its own unit, the coarsest power of ten in
// which its capacity and every consumption of it are whole numbers ("7" and
// "1500m" give 10^-1, "5e15" alone 10^15). When those whole numbers, summed
// in absolute value, fit comfortably into an int64, the counter is kept in
// int64 and every balance PoolUsage can reach stays in range (a device is
// charged at most once); otherwise the counter is kept in big.Int, slower
// but still exact.

// decimal is a quantity as mantissa * 10^exp, exactly.
type decimal struct {
	m   int64
	big *big.Int // the mantissa, when it does not fit an int64
	exp int32
}

func (d decimal) isZero() bool { return d.big == nil && d.m == 0 }

// decimalOf decomposes q without rounding. buf is scratch for the digits.
func decimalOf(q resource.Quantity, buf []byte) decimal {
	digits, exp := q.AsCanonicalBytes(buf[:0])
	neg := len(digits) > 0 && digits[0] == '-'
	if neg {
		digits = digits[1:]
	}
	for len(digits) > 1 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	if len(digits) == 1 && digits[0] == '0' {
		return decimal{}
	}
	if len(digits) <= 18 {
		var m int64
		for _, c := range digits {
			m = m*10 + int64(c-'0')
		}
		if neg {
			m = -m
		}
		return decimal{m: m, exp: exp}
	}
	b, _ := new(big.Int).SetString(string(digits), 10)
	if neg {
		b.Neg(b)
	}
	return decimal{big: b, exp: exp}
}

// pow10 holds 10^0 .. 10^18, every power of ten an int64 holds.
var pow10 = func() (p [19]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// scaled returns d in units of 10^unit (unit <= d.exp) as an int64, or
// false when it does not fit.
func (d decimal) scaled(unit int32) (int64, bool) {
	if d.isZero() {
		return 0, true
	}
	if d.big != nil {
		return 0, false
	}
	shift := d.exp - unit
	if shift < 0 || shift >= int32(len(pow10)) {
		return 0, false
	}
	f := pow10[shift]
	if d.m > math.MaxInt64/f || d.m < -math.MaxInt64/f {
		return 0, false
	}
	return d.m * f, true
}

// scaledBig returns d in units of 10^unit (unit <= d.exp) as a big.Int.
func (d decimal) scaledBig(unit int32) *big.Int {
	v := new(big.Int)
	if d.big != nil {
		v.Set(d.big)
	} else {
		v.SetInt64(d.m)
	}
	if shift := d.exp - unit; shift > 0 {
		v.Mul(v, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(shift)), nil))
	}
	return v
}

// smallBound is the largest sum of |capacity| and |consumptions| of one
// counter kept in int64; half of MaxInt64 leaves room for the sign of a
// balance.
const smallBound = math.MaxInt64 / 2

// Formats of consumption values, so that reported consumption keeps the
// format the driver wrote (as Quantity.Add does).
const (
	formatUnset uint8 = iota
	formatDecimalSI
	formatBinarySI
	formatDecimalExponent
)

func formatCode(f resource.Format) uint8 {
	switch f {
	case resource.BinarySI:
		return formatBinarySI
	case resource.DecimalExponent:
		return formatDecimalExponent
	}
	return formatDecimalSI
}

func formatOf(c uint8) resource.Format {
	switch c {
	case formatBinarySI:
		return resource.BinarySI
	case formatDecimalExponent:
		return resource.DecimalExponent
	}
	return resource.DecimalSI
}

// quantityOf is v * 10^unit as a Quantity in format f.
func quantityOf(v int64, unit int32, f resource.Format) resource.Quantity {
	q := resource.NewScaledQuantity(v, resource.Scale(unit))
	q.Format = f
	return *q
}

// bigQuantityOf is v * 10^unit as a Quantity in format f. It goes through
// the decimal exponent notation, which ParseQuantity reads exactly; this is
// the rare path of counters beyond int64.
func bigQuantityOf(v *big.Int, unit int32, f resource.Format) resource.Quantity {
	q, err := resource.ParseQuantity(v.String() + "e" + strconv.Itoa(int(unit)))
	if err != nil {
		// Beyond what a Quantity can hold; the API server cannot have
		// stored such a value.
		return resource.Quantity{}
	}
	// Set the format on a fresh Quantity: the parsed one caches its string.
	return *resource.NewDecimalQuantity(*q.AsDec(), f)
}
