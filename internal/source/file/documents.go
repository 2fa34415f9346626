package file

import (
	"bytes"
)

// document is one YAML document of a file and the file line it starts on.
type document struct {
	data []byte
	line int
}

// splitDocuments splits a YAML stream at "---" separator lines. Text before the first
// separator counts as a document only when it holds more than blank lines and comments, so a
// file starting with "---" (or a comment and "---") begins with document 1. Documents share
// data's memory.
func splitDocuments(data []byte) []document {
	var docs []document
	cur := document{line: 1}
	start, pos := 0, 0 // cur.data is data[start:pos]
	started := false
	lineNo := 0
	for pos < len(data) {
		end := len(data)
		if i := bytes.IndexByte(data[pos:], '\n'); i >= 0 {
			end = pos + i + 1
		}
		lineNo++
		if isSeparator(bytes.TrimRight(data[pos:end], "\r\n")) {
			cur.data = data[start:pos:pos]
			if started || hasContent(cur.data) {
				docs = append(docs, cur)
			}
			cur, started = document{line: lineNo + 1}, true
			start = end
		}
		pos = end
	}
	cur.data = data[start:pos:pos]
	if started || hasContent(cur.data) {
		docs = append(docs, cur)
	}
	return docs
}

// hasContent reports whether a chunk of YAML has a line that is neither blank nor a comment.
func hasContent(b []byte) bool {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return true
		}
	}
	return false
}

func isSeparator(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	rest := line[3:]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}
