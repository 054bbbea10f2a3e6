package cluster

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"net/netip"
	"strings"
)

// parseProcRoutes reads the IPv4 destinations of /proc/net/route (hex,
// in the machine's byte order, which is little-endian on every machine
// this runs on), without the default route.
func parseProcRoutes(table string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	lines := strings.Split(strings.TrimSpace(table), "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		if i == 0 || len(f) < 8 {
			continue // header
		}
		dst, err := hexIPv4(f[1])
		if err != nil {
			return nil, fmt.Errorf("/proc/net/route line %d: destination: %w", i+1, err)
		}
		mask, err := hexIPv4(f[7])
		if err != nil {
			return nil, fmt.Errorf("/proc/net/route line %d: mask: %w", i+1, err)
		}
		ones := bits.OnesCount32(binary.BigEndian.Uint32(mask.AsSlice()))
		if ones == 0 {
			continue // the default route covers everything; it is not a conflict
		}
		out = append(out, netip.PrefixFrom(dst, ones).Masked())
	}
	return out, nil
}

// hexIPv4 decodes an address as /proc/net/route writes it.
func hexIPv4(s string) (netip.Addr, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return netip.Addr{}, fmt.Errorf("%q is not 8 hex digits", s)
	}
	return netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}), nil
}

// overlaps reports whether any of want overlaps any of have.
func overlaps(have []netip.Prefix, want ...netip.Prefix) bool {
	for _, h := range have {
		for _, w := range want {
			if h.Overlaps(w) {
				return true
			}
		}
	}
	return false
}
