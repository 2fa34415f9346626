package file

import (
	"bytes"
	"io"
	"os"
	"sync"
	"unsafe"
)

// filesCache remembers the objects of each file with the content they came from, so that a
// reload after one file changed decodes only that file: with 100 000 routes, decoding is
// most of the time a reload takes. Only the files of the latest Load are kept.
type filesCache struct {
	mu sync.Mutex
	m  map[string]fileEntry // nil until the first put
	// chunk is the buffer an unchanged file is compared through: a reload reads a 6 MB
	// file that did not change without allocating or touching 6 MB of memory.
	chunk []byte
}

type fileEntry struct {
	data []byte
	objs []object
	// byDoc groups objs by the text of the document they came from (the keys point into
	// data, which is never written again).
	byDoc map[string][]object
}

// chunkSize is the size of the comparison buffer.
const chunkSize = 64 << 10

// read reads a file. When its content is what the cache holds for it, it returns the
// cached slice itself, having compared the file through a small buffer; otherwise a new
// buffer sized for the file, which put may keep as it is. Either way nothing else writes
// to the result.
func (c *filesCache) read(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c.mu.Lock()
	prev := c.m[name].data
	chunk := c.chunk
	c.chunk = nil // in use: a concurrent read makes its own
	c.mu.Unlock()
	size := int64(len(prev))
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	same := 0 // prev[:same] is what the file held so far
	if prev != nil {
		if chunk == nil {
			chunk = make([]byte, chunkSize)
		}
		defer func() {
			c.mu.Lock()
			c.chunk = chunk
			c.mu.Unlock()
		}()
		for {
			n, err := io.ReadFull(f, chunk)
			if n > 0 && (same+n > len(prev) || !bytes.Equal(chunk[:n], prev[same:same+n])) {
				// It changed: what was read so far goes into a buffer of its own.
				buf := make([]byte, 0, max(size, int64(same+n))+512)
				buf = append(append(buf, prev[:same]...), chunk[:n]...)
				if err != nil { // short read: the end of the file
					return buf, nil
				}
				return readRest(f, buf)
			}
			same += n
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				if same == len(prev) {
					return prev, nil
				}
				return bytes.Clone(prev[:same]), nil // the file shrank to a prefix of itself
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return readRest(f, make([]byte, 0, size+512)) // the size may change while reading: one more byte tells EOF
}

// readRest appends the rest of f to buf.
func readRest(f *os.File, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// get returns what the last error-free read of a file left.
func (c *filesCache) get(name string) (fileEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	return e, ok
}

// put records the objects of a file read without errors: objs, in the order of docs, the
// file's documents. data is what read returned, a buffer nothing else writes to: the cache
// keeps it as it is.
func (c *filesCache) put(name string, data []byte, docs []document, objs []object) {
	byDoc := make(map[string][]object, len(docs))
	// The objects of one document are a run of objs: each document's list is that run.
	for i := 0; i < len(objs); {
		j := i + 1
		for j < len(objs) && objs[j].w.doc == objs[i].w.doc {
			j++
		}
		if d := docs[objs[i].w.doc-1].data; len(d) > 0 {
			byDoc[unsafe.String(unsafe.SliceData(d), len(d))] = objs[i:j:j]
		}
		i = j
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]fileEntry{}
	}
	c.m[name] = fileEntry{data: data, objs: objs, byDoc: byDoc}
	c.mu.Unlock()
}

// keep drops every file not in names.
func (c *filesCache) keep(names map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.m {
		if !names[n] {
			delete(c.m, n)
		}
	}
}
