package bundle

import (
	"strings"
	"unicode"
)

// displayName splits a Go kind into words for the OLM console, keeping
// acronyms together: "DevicePool" -> "Device Pool", "DRAStack" -> "DRA Stack".
func displayName(kind string) string {
	r := []rune(kind)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				b.WriteRune(' ')
			}
		}
		b.WriteRune(c)
	}
	return b.String()
}

// firstParagraph returns text up to its first blank line, on one line.
func firstParagraph(text string) string {
	var words []string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.TrimSpace(line) == "" {
			break
		}
		words = append(words, strings.Fields(line)...)
	}
	return strings.Join(words, " ")
}
