package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// document is the text of one YAML document and where it is.
type document struct {
	// Source.Line is the first line with content (after leading comments).
	Source Source
	Text   []byte
	// TextStart is the line in the file of the first line of Text, which
	// YAML parser messages count from.
	TextStart int
}

// inputExtensions are the files read from a directory given to -f, like
// kubectl does.
var inputExtensions = []string{".yaml", ".yml", ".json"}

// readInputs reads every -f argument in order: "-" is stdin, a directory is
// its .yaml, .yml and .json files in name order (not recursive), anything
// else a file. It returns the documents of all of them in order.
func readInputs(paths []string, stdin io.Reader) ([]document, error) {
	var docs []document
	for _, p := range paths {
		if p == "-" {
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, &InputError{Source: Source{File: p}, Err: fmt.Errorf("read: %w", err)}
			}
			docs = append(docs, splitDocuments(p, data)...)
			continue
		}
		files, err := expandPath(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, &InputError{Source: Source{File: f}, Err: fmt.Errorf("read: %w", err)}
			}
			docs = append(docs, splitDocuments(f, data)...)
		}
	}
	return docs, nil
}

// expandPath returns p, or the input files of directory p.
func expandPath(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, &InputError{Source: Source{File: p}, Err: errors.Unwrap(err)}
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, &InputError{Source: Source{File: p}, Err: fmt.Errorf("read directory: %w", err)}
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() || !slices.Contains(inputExtensions, strings.ToLower(filepath.Ext(e.Name()))) {
			continue
		}
		files = append(files, filepath.Join(p, e.Name()))
	}
	if len(files) == 0 {
		return nil, &InputError{Source: Source{File: p}, Err: fmt.Errorf("directory has no %s files", strings.Join(inputExtensions, ", "))}
	}
	return files, nil // os.ReadDir sorts by name
}

// splitDocuments cuts a YAML stream at its "---" separator lines. A
// separator may be followed by a comment, or by content that then starts the
// next document ("--- {kind: Node}"). Documents holding only blanks and
// comments are dropped and not counted.
func splitDocuments(file string, data []byte) []document {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	var (
		docs  []document
		cur   []byte
		start = 1
		line  = 0
	)
	flush := func(next int) {
		if skip, ok := firstContentLine(cur); ok {
			docs = append(docs, document{
				Source:    Source{File: file, Doc: len(docs) + 1, Line: start + skip},
				Text:      cur,
				TextStart: start,
			})
		}
		cur, start = nil, next
	}
	for len(data) > 0 {
		line++
		l := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		rest, isSep := separatorRest(l)
		if !isSep {
			cur = append(cur, l...)
			continue
		}
		flush(line + 1)
		if hasContent(rest) {
			start = line
			// Keep the column of the content so indentation still lines up.
			cur = append(cur, bytes.Repeat([]byte(" "), len(l)-len(rest))...)
			cur = append(cur, rest...)
		}
	}
	flush(line)
	return docs
}

// separatorRest reports whether l is a document separator line and returns
// what follows "---" on it.
func separatorRest(l []byte) ([]byte, bool) {
	if !bytes.HasPrefix(l, []byte("---")) {
		return nil, false
	}
	rest := l[3:]
	if len(rest) == 0 {
		return rest, true
	}
	switch rest[0] {
	case ' ', '\t', '\r', '\n':
		return rest, true
	}
	return nil, false
}

// hasContent reports whether text holds anything but blanks and comments.
func hasContent(text []byte) bool {
	_, ok := firstContentLine(text)
	return ok
}

// firstContentLine returns how many lines of text precede the first one
// that is not blank or a comment, and false if there is none.
func firstContentLine(text []byte) (int, bool) {
	for n := 0; len(text) > 0; n++ {
		l := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			l, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		t := bytes.TrimSpace(l)
		if len(t) > 0 && t[0] != '#' {
			return n, true
		}
	}
	return 0, false
}
