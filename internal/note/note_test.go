package note

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// bigSelector is a CEL selector of about 1 KB that names an attribute the
// devices lack, as in the claim of issue 22.
var bigSelector = `device.attributes["gpu.example.com"].nosuchattr == "x" && ` +
	strings.Repeat(`device.attributes["gpu.example.com"].model == "a100" && `, 18) + `true`

func TestShorten(t *testing.T) {
	engineErr := `native engine: claim demo/big: spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "` +
		strings.ReplaceAll(bigSelector, `"`, `\"`) + `": CEL runtime error: no such key: nosuchattr (not retried until the claim changes)`
	tests := []struct {
		name  string
		in    string
		limit int
		// keep must all survive; gone must not.
		keep []string
		gone []string
	}{
		{name: "short text is left alone, on one line", in: "a\n  b\tc", limit: 100, keep: []string{"a b c"}},
		{name: "a long quoted selector gives way to the cause", in: engineErr, limit: 1000,
			keep: []string{"native engine: claim demo/big:", "selectors[0].cel.expression: Invalid value:", `device.attributes[\"gpu.example.com\"].nosuchattr`,
				"CEL runtime error: no such key: nosuchattr (not retried until the claim changes)"}},
		{name: "the longest quote goes first", in: `patch "` + strings.Repeat("p", 600) + `" on object "kubelet-plugin": no match for the target`, limit: 200,
			keep: []string{`on object "kubelet-plugin": no match for the target`, `patch "ppp`}},
		{name: "back quotes and CEL's single quotes count", in: "rule `" + strings.Repeat("x", 300) + "` and 'y" + strings.Repeat("z", 300) + "' failed: cost limit", limit: 150,
			keep: []string{"rule `xxx", "and 'yzz", "failed: cost limit"}},
		{name: "an apostrophe is no quote", in: "the driver's " + strings.Repeat("w ", 200) + "cause: out of counters", limit: 120,
			keep: []string{"the driver's", "cause: out of counters"}},
		{name: "without quotes the middle goes, the cause stays", in: "allocate: " + strings.Repeat("step, ", 300) + "final cause: no node fits", limit: 200,
			keep: []string{"allocate: step", Ellipsis, "final cause: no node fits"}},
		{name: "an unterminated quote is plain text", in: `value "` + strings.Repeat("q", 500) + " cause here", limit: 100,
			keep: []string{`value "qqq`, "cause here"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Shorten(tc.in, tc.limit)
			if len(got) > tc.limit {
				t.Errorf("len %d > %d: %q", len(got), tc.limit, got)
			}
			for _, k := range tc.keep {
				if !strings.Contains(got, k) {
					t.Errorf("lost %q:\n%s", k, got)
				}
			}
			if strings.ContainsAny(got, "\n\t") || !utf8.ValidString(got) {
				t.Errorf("not one valid line: %q", got)
			}
		})
	}
}

// FuzzShorten: any input comes out within the limit, valid UTF-8 when the
// input was, on one line, and unchanged (but for white space) when it fit.
func FuzzShorten(f *testing.F) {
	f.Add(`a "b" c`, 20)
	f.Add(`x "`+strings.Repeat("é", 300)+`" y: cause`, 100)
	f.Add("plain \n text", 5)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit > 1<<16 || limit < -1<<16 {
			return
		}
		got := Shorten(s, limit)
		want := max(limit, 16)
		if len(got) > want {
			t.Fatalf("Shorten(%q, %d) = %q: %d bytes", s, limit, got, len(got))
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Shorten(%q, %d) = %q: split a character", s, limit, got)
		}
		if one := strings.Join(strings.Fields(s), " "); len(one) <= want && got != one {
			t.Fatalf("Shorten(%q, %d) = %q, want it unchanged", s, limit, got)
		}
	})
}

// The old cut (the first 1000 bytes and " ...") lost the cause of the
// engine's error; this pins what the Event note keeps now.
func TestShortenKeepsTheCauseOfASelectorError(t *testing.T) {
	msg := `native engine: spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "` + bigSelector + `": CEL runtime error: no such key: nosuchattr`
	if len(msg) < 1100 {
		t.Fatalf("the message should be over 1 KB, is %d bytes", len(msg))
	}
	if got := Shorten(msg, 1000); !strings.HasSuffix(got, "CEL runtime error: no such key: nosuchattr") {
		t.Fatalf("cause lost: %q", got)
	}
}
