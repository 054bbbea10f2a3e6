package cli

import (
	"fmt"
	"strings"
	"testing"
)

func TestSplitDocuments(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want lists each document as "line:text" (line of its first
		// content, text with newlines as |).
		want []string
	}{
		{"one document", "a: 1\nb: 2\n", []string{"1:a: 1|b: 2|"}},
		{"leading separator is not a document", "---\na: 1\n", []string{"2:a: 1|"}},
		{"comments before content move the line", "# head\n\na: 1\n---\n# c\nb: 2\n", []string{"3:# head||a: 1|", "6:# c|b: 2|"}},
		{"empty and comment-only documents are not counted", "a: 1\n---\n---\n# only a comment\n---\nb: 2\n", []string{"1:a: 1|", "6:b: 2|"}},
		{"separator with a comment", "a: 1\n--- # next\nb: 2\n", []string{"1:a: 1|", "3:b: 2|"}},
		{"content on the separator line keeps its column", "--- {a: 1}\n", []string{"1:    {a: 1}|"}},
		{"---x is not a separator", "a: |\n  x\n---x: 1\n", []string{"1:a: ||  x|---x: 1|"}},
		{"CRLF separators", "a: 1\r\n---\r\nb: 2\r\n", []string{"1:a: 1\r|", "3:b: 2\r|"}},
		{"byte order mark", "\ufeffa: 1\n", []string{"1:a: 1|"}},
		{"no trailing newline", "a: 1\n---\nb: 2", []string{"1:a: 1|", "3:b: 2"}},
		{"nothing", "\n# x\n---\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for i, d := range splitDocuments("f", []byte(tt.in)) {
				if d.Source.Doc != i+1 || d.Source.File != "f" {
					t.Errorf("document %d has source %+v", i+1, d.Source)
				}
				got = append(got, fmt.Sprintf("%d:%s", d.Source.Line, strings.ReplaceAll(string(d.Text), "\n", "|")))
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestFileLines(t *testing.T) {
	tests := []struct {
		msg   string
		start int
		want  string
	}{
		{"yaml: line 3: mapping values are not allowed", 10, "yaml: line 12: mapping values are not allowed"},
		{"yaml: line 3: mapping values are not allowed", 1, "yaml: line 3: mapping values are not allowed"},
		{`yaml: unmarshal errors:\n  line 2: key "a" already set in map`, 5, `yaml: unmarshal errors:\n  line 6: key "a" already set in map`},
		{"no line here", 7, "no line here"},
	}
	for _, tt := range tests {
		if got := fileLines(tt.msg, tt.start); got != tt.want {
			t.Errorf("fileLines(%q, %d) = %q, want %q", tt.msg, tt.start, got, tt.want)
		}
	}
}
