package cli

import (
	"fmt"
	"strings"
)

// Source says where an object came from, so that every message about bad
// input points at a place the user can open: the file, the document inside
// it and the line where that document starts, and for the items of a kind:
// List document, the item.
type Source struct {
	// File is the path as given to -f; "-" is standard input.
	File string
	// Doc is the 1-based index of the document among the documents of the
	// file that hold something (documents that are empty or only comments,
	// as templating tools leave behind, are not counted).
	Doc int
	// Line is the 1-based line where the document starts.
	Line int
	// Item is the 1-based index inside a List document, 0 otherwise.
	Item int
}

func (s Source) String() string {
	var b strings.Builder
	if s.File == "-" {
		b.WriteString("<stdin>")
	} else {
		b.WriteString(s.File)
	}
	fmt.Fprintf(&b, ": document %d", s.Doc)
	if s.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", s.Line)
	}
	if s.Item > 0 {
		fmt.Fprintf(&b, ", item %d", s.Item)
	}
	return b.String()
}

// InputError is bad input: a file that cannot be read, a document that is
// not YAML, an object with an unknown field, or a claim the engine rejects as
// invalid. It maps to exit code 1.
type InputError struct {
	// Source is where the bad input is; zero when it is not in a document
	// (a file that cannot be opened).
	Source Source
	// Object names the object ("ResourceClaim default/gpu"), if known.
	Object string
	// Field is the path of the offending field, if known.
	Field string
	// Err is the problem.
	Err error
}

func (e *InputError) Error() string {
	var parts []string
	if e.Source.Doc > 0 {
		parts = append(parts, e.Source.String())
	} else if e.Source.File != "" {
		parts = append(parts, Source{File: e.Source.File}.fileName())
	}
	if e.Object != "" {
		parts = append(parts, e.Object)
	}
	if e.Field != "" {
		parts = append(parts, e.Field)
	}
	parts = append(parts, e.Err.Error())
	return strings.Join(parts, ": ")
}

func (e *InputError) Unwrap() error { return e.Err }

func (s Source) fileName() string {
	if s.File == "-" {
		return "<stdin>"
	}
	return s.File
}
