package cluster

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// logTailLines is how much of a component's log a startup error carries:
// enough to show the fatal message and what led to it, short enough to read
// in a test failure.
const logTailLines = 40

// logTailMaxBytes bounds how much of a large log is read to find the tail.
const logTailMaxBytes = 256 << 10

// tailLines returns the last n lines of data, without a trailing newline.
func tailLines(data []byte, n int) string {
	text := strings.TrimRight(string(data), "\n")
	if text == "" || n <= 0 {
		return ""
	}
	lines := strings.Split(text, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// readTail returns the last logTailLines lines of the file at path.
func readTail(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}
	offset := info.Size() - logTailMaxBytes
	if offset < 0 {
		offset = 0
	}
	buf := make([]byte, info.Size()-offset)
	if _, err := f.ReadAt(buf, offset); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if offset > 0 {
		// Drop the partial first line.
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		}
	}
	return tailLines(buf, logTailLines), nil
}

// logTailError is an error followed by the tail of a component log. It
// unwraps to the original error so callers can still inspect it.
type logTailError struct {
	err     error
	logPath string
	tail    string
}

func (e *logTailError) Error() string {
	if e.tail == "" {
		return fmt.Sprintf("%v (log %s is empty)", e.err, e.logPath)
	}
	return fmt.Sprintf("%v\n--- last lines of %s ---\n%s\n---", e.err, e.logPath, e.tail)
}

func (e *logTailError) Unwrap() error { return e.err }

// withLogTail attaches the tail of each log to err, in order.
func withLogTail(err error, logPaths ...string) error {
	for _, path := range logPaths {
		tail, readErr := readTail(path)
		if readErr != nil {
			tail = "(could not read log: " + readErr.Error() + ")"
		}
		err = &logTailError{err: err, logPath: path, tail: tail}
	}
	return err
}
