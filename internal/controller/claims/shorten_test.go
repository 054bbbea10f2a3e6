package claims

import (
	"strings"
	"testing"
)

// An Unsatisfiable or Refused note that quotes a 1 KB selector keeps the
// engine's cause (issue 22): the quoted expression is shortened instead of
// the end of the note.
func TestEventNoteKeepsTheCause(t *testing.T) {
	selector := `device.attributes["gpu.example.com"].nosuchattr == "x" && ` +
		strings.Repeat(`device.attributes["gpu.example.com"].model == "a100" && `, 18) + `true`
	note := `native engine: spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "` +
		strings.ReplaceAll(selector, `"`, `\"`) + `": CEL runtime error: no such key: nosuchattr (not retried until the claim changes)`
	got := shorten(note)
	if len(got) > maxNote {
		t.Fatalf("note of %d bytes, limit %d", len(got), maxNote)
	}
	for _, keep := range []string{"native engine:", "selectors[0].cel.expression", "CEL runtime error: no such key: nosuchattr"} {
		if !strings.Contains(got, keep) {
			t.Errorf("the note lost %q: %s", keep, got)
		}
	}
}
