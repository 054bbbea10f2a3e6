// Package note shortens the human text of Events and conditions without
// losing why something happened. The API server bounds an Event's note
// (1024 bytes) and the operator bounds condition and status messages; a
// message that quotes a long CEL expression, a patch or an object would
// otherwise be cut at its end, which is where a wrapped Go error keeps its
// cause ("allocate claim x: request r: selector \"...1 KB...\": CEL runtime
// error: no such key: nosuchattr"). Shorten gives up quoted text first,
// then the middle of the message, and keeps its start (what and where) and
// its end (the cause).
package note

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Ellipsis marks where text was left out.
const Ellipsis = "..."

// Bounds of what Shorten keeps.
const (
	// longQuote is the longest quoted span kept whole on the first pass;
	// later passes halve it down to minQuote.
	longQuote = 160
	// minQuote is the least a quoted span keeps: enough to recognise the
	// expression.
	minQuote = 24
)

// Shorten returns s on one line (white space runs become one space) and at
// most limit bytes long. Quoted spans ("...", `...`, and '...' outside the
// others) are shortened first, longest first, keeping the start and end of
// each; if that is not enough, the middle of the message goes, keeping a
// third at the start and the rest at the end. It never splits a UTF-8
// character. A limit below 16 is taken as 16.
func Shorten(s string, limit int) string {
	limit = max(limit, 16)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= limit {
		return s
	}
	for keep := longQuote; keep >= minQuote && len(s) > limit; keep /= 2 {
		s = shrinkQuotes(s, keep, len(s)-limit)
	}
	if len(s) <= limit {
		return s
	}
	head := limit / 3
	tail := limit - head - len(" "+Ellipsis+" ")
	return cutBefore(s, head) + " " + Ellipsis + " " + s[cutAfter(s, len(s)-tail):]
}

// span is the content of one quoted span, s[start:end], without quotes.
type span struct{ start, end int }

// quotedSpans finds the quoted spans of s: double-quoted (with backslash
// escapes, as %q writes them), back-quoted, and single-quoted outside
// those (CEL's own quoting). An unterminated quote ends the scan.
func quotedSpans(s string) []span {
	var out []span
	for i := 0; i < len(s); i++ {
		q := s[i]
		if q != '"' && q != '`' && q != '\'' {
			continue
		}
		if q == '\'' && i > 0 && isWordByte(s[i-1]) {
			// An apostrophe (driver's, can't), not a quote.
			continue
		}
		j := i + 1
		for j < len(s) && s[j] != q {
			if q == '"' && s[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(s) {
			break
		}
		out = append(out, span{i + 1, j})
		i = j
	}
	return out
}

func isWordByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// shrinkQuotes shortens quoted spans longer than keep to keep bytes (start
// and end, Ellipsis between), longest first, until need bytes were saved
// or none is left to shorten.
func shrinkQuotes(s string, keep, need int) string {
	spans := quotedSpans(s)
	// Longest first: the expression that made the message long goes first.
	order := make([]int, 0, len(spans))
	for i, sp := range spans {
		if sp.end-sp.start > keep {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return length(spans[b]) - length(spans[a]) })
	replace := map[int]string{}
	saved := 0
	for _, i := range order {
		if saved >= need {
			break
		}
		sp := spans[i]
		inner := s[sp.start:sp.end]
		head := (keep - len(Ellipsis)) * 2 / 3
		tail := keep - len(Ellipsis) - head
		short := cutBefore(inner, head) + Ellipsis + inner[cutAfter(inner, len(inner)-tail):]
		replace[i] = short
		saved += len(inner) - len(short)
	}
	if len(replace) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for i, sp := range spans {
		r, ok := replace[i]
		if !ok {
			continue
		}
		b.WriteString(s[last:sp.start])
		b.WriteString(r)
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String()
}

func length(sp span) int { return sp.end - sp.start }

// cutBefore returns the longest prefix of s of at most n bytes that ends
// on a character boundary.
func cutBefore(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutAfter returns the smallest index >= i that starts a character.
func cutAfter(s string, i int) int {
	if i <= 0 {
		return 0
	}
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}
