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
	// scratch is the buffer files are read into: an unchanged 6 MB file is compared with
	// the cache without allocating 6 MB on every reload.
	scratch []byte
}

type fileEntry struct {
	data []byte
	objs []object
	// byDoc groups objs by the text of the document they came from (the keys point into
	// data, which is never written again).
	byDoc map[string][]object
}

// read reads a file into the scratch buffer: the data is valid until the next read, unless
// put kept it.
func (c *filesCache) read(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c.mu.Lock()
	buf := c.scratch[:0]
	c.mu.Unlock()
	if st, err := f.Stat(); err == nil && int64(cap(buf)) <= st.Size() {
		buf = make([]byte, 0, st.Size()+512) // the size may change while reading: one more byte tells EOF
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.scratch = buf
	c.mu.Unlock()
	return buf, nil
}

// get returns what the last error-free read of a file left.
func (c *filesCache) get(name string) (fileEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	return e, ok
}

func (c *filesCache) put(name string, data []byte, objs []object) {
	c.mu.Lock()
	if len(data) > 0 && len(c.scratch) > 0 && &c.scratch[0] == &data[0] {
		// A buffer the file fills (read sized it for this file) is kept as it is and the
		// next read makes a new one: a first load of a 4 MB file copies nothing more. A
		// small file in a buffer a larger one grew is copied, so the cache keeps no slack.
		if cap(data)-len(data) <= 512+len(data)/8 {
			data, c.scratch = data[:len(data):len(data)], nil
		} else {
			data = bytes.Clone(data)
		}
	}
	c.mu.Unlock()
	docs := splitDocuments(data)
	byDoc := make(map[string][]object, len(docs))
	for _, o := range objs {
		if d := docs[o.w.doc-1].data; len(d) > 0 {
			k := unsafe.String(unsafe.SliceData(d), len(d))
			byDoc[k] = append(byDoc[k], o)
		}
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
