package bundle

import "testing"

func TestDisplayName(t *testing.T) {
	cases := map[string]string{
		"Widget":     "Widget",
		"DevicePool": "Device Pool",
		"DRAStack":   "DRA Stack",
		"HTTPGadget": "HTTP Gadget",
		"GPU":        "GPU",
		"Pod2Node":   "Pod2 Node",
		"":           "",
	}
	for in, want := range cases {
		if got := displayName(in); got != want {
			t.Errorf("displayName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFirstParagraph(t *testing.T) {
	cases := map[string]string{
		"One line.":                         "One line.",
		"Two\nlines.":                       "Two lines.",
		"  Indented\n  text.\n\nSecond.":    "Indented text.",
		"\n\nLeading blank.\n\nnext":        "Leading blank.",
		"":                                  "",
		"Spaces   inside\tkept as one.\n\n": "Spaces inside kept as one.",
	}
	for in, want := range cases {
		if got := firstParagraph(in); got != want {
			t.Errorf("firstParagraph(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLabelValue(t *testing.T) {
	cases := map[string]string{
		"registry+v1":  "registry+v1",
		"manifests/":   "manifests/",
		"alpha,stable": "alpha,stable",
		"two words":    `"two words"`,
		`say "hi"`:     `"say \"hi\""`,
		"$HOME":        `"\$HOME"`,
		"":             `""`,
	}
	for in, want := range cases {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %s, want %s", in, got, want)
		}
	}
}
