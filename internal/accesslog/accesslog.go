// Package accesslog writes the data plane's access log: one line per connection, in the
// same JSON or text form as the rest of snigate's log/slog output, at a fraction of its
// cost.
//
// Use one Sink per output stream, the rest of the program's slog handler on Sink.Direct, and
// a Logger per format:
//
//	sink := accesslog.NewSink(os.Stderr, accesslog.SinkOptions{})
//	defer sink.Close()
//	log := slog.New(slog.NewJSONHandler(sink.Direct(), nil))
//	access := accesslog.New(sink, accesslog.JSON)
//	e := access.Begin("connection")
//	e.Str("sni", sni).AddrPort("client", peer).Int("bytes_in", n).Dur("duration", d)
//	e.End()
//
// Why it exists: the access log is on by default, and through slog a line cost a proxied
// connection about 16 µs of CPU (86 against 70 µs in bench/run.sh): about 2–5 µs in the
// JSON handler (a Record, an any per field, the generic encoder), a write system call per
// line, and the runtime's sysmon, which every blocking system call wakes from its deep
// sleep. A Logger encodes its fixed set of field kinds straight into a pooled buffer
// (no reflection, no allocation), and the Sink batches lines into one write every
// FlushDelay or 64 KiB, made by its own goroutine, so a connection never waits on the log's
// file or pipe. The line format is slog's, byte for byte (the tests check it against
// slog's handlers), so one parser reads both.
//
// Lines are kept, not sampled: when the output cannot keep up and MaxPending bytes are
// waiting, further lines are dropped and counted (Sink.Dropped, exported as a metric), and
// the next written batch says how many were lost. Lines written through Direct (every
// other log line) flush the pending access lines first and are written at once, so the
// stream stays in order and an error is never held back. Close writes what waits; a crash
// loses at most the last FlushDelay of access lines, never another line.
package accesslog

import (
	"io"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
)

// Format is the line format: slog's JSONHandler or TextHandler.
type Format int

const (
	JSON Format = iota
	Text
)

// SinkOptions tune a Sink; zero values take the defaults.
type SinkOptions struct {
	// FlushDelay is how long a line may wait for others to share its write (default 50 ms).
	FlushDelay time.Duration
	// FlushSize makes the Sink write at once when this many bytes wait (default 64 KiB).
	FlushSize int
	// MaxPending is how many bytes may wait while the output is slow before lines are
	// dropped (default 4 MiB).
	MaxPending int
	// OnDrop is called once per dropped line (a metric's Inc), if set.
	OnDrop func()
	// Format is the format of the Sink's own warning that lines were dropped.
	Format Format
}

// Sink batches lines for one output. Its methods are safe for concurrent use.
type Sink struct {
	out  io.Writer
	opts SinkOptions

	wmu sync.Mutex // held while writing to out: keeps batches and Direct lines in order

	mu      sync.Mutex
	pending []byte
	spare   []byte
	closed  bool
	lost    int64 // dropped since the last batch written

	dropped atomic.Int64
	kick    chan struct{} // a first line is waiting
	full    chan struct{} // FlushSize bytes are waiting
	done    chan struct{}
	stopped chan struct{}
}

// NewSink starts a Sink writing to out. Close flushes and stops it.
func NewSink(out io.Writer, opts SinkOptions) *Sink {
	if opts.FlushDelay <= 0 {
		opts.FlushDelay = 50 * time.Millisecond
	}
	if opts.FlushSize <= 0 {
		opts.FlushSize = 64 << 10
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 4 << 20
	}
	s := &Sink{out: out, opts: opts,
		kick: make(chan struct{}, 1), full: make(chan struct{}, 1),
		done: make(chan struct{}), stopped: make(chan struct{})}
	go s.run()
	return s
}

// Dropped is the number of lines dropped because the output could not keep up.
func (s *Sink) Dropped() int64 { return s.dropped.Load() }

// add queues one complete line.
func (s *Sink) add(line []byte) {
	s.mu.Lock()
	if s.closed {
		// After Close nothing flushes: write through, in order.
		s.mu.Unlock()
		s.wmu.Lock()
		s.out.Write(line)
		s.wmu.Unlock()
		return
	}
	if len(s.pending)+len(line) > s.opts.MaxPending {
		s.lost++
		s.mu.Unlock()
		s.dropped.Add(1)
		if s.opts.OnDrop != nil {
			s.opts.OnDrop()
		}
		return
	}
	first := len(s.pending) == 0
	s.pending = append(s.pending, line...)
	big := len(s.pending) >= s.opts.FlushSize
	s.mu.Unlock()
	if first {
		signal(s.kick)
	}
	if big {
		signal(s.full)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (s *Sink) run() {
	defer close(s.stopped)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-s.kick:
		case <-s.full:
		case <-s.done:
			s.flush(nil)
			return
		}
		// Wait for more lines to share the write, unless enough are there already.
		t.Reset(s.opts.FlushDelay)
		select {
		case <-t.C:
		case <-s.full:
			t.Stop()
		case <-s.done:
			t.Stop()
			s.flush(nil)
			return
		}
		s.flush(nil)
	}
}

// flush writes what is pending, then extra (a Direct line), in one write when it can.
func (s *Sink) flush(extra []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	buf, lost := s.pending, s.lost
	s.pending, s.spare, s.lost = s.spare[:0], nil, 0
	s.mu.Unlock()
	if lost > 0 {
		buf = appendHeader(buf, s.opts.Format, time.Now(), "WARN", "access log lines dropped: the log output was too slow")
		e := Entry{l: &Logger{format: s.opts.Format}, buf: buf}
		e.Int("dropped", lost)
		buf = e.end()
	}
	var err error
	if len(buf) > 0 {
		if len(extra) > 0 && len(buf)+len(extra) <= s.opts.FlushSize {
			buf = append(buf, extra...)
			extra = nil
		}
		_, err = s.out.Write(buf)
	}
	if len(extra) > 0 {
		if _, werr := s.out.Write(extra); err == nil {
			err = werr
		}
	}
	s.mu.Lock()
	if s.spare == nil && cap(buf) <= 2*s.opts.FlushSize {
		s.spare = buf[:0] // keep one buffer for the next swap; a grown one goes
	}
	s.mu.Unlock()
	return err
}

// Close writes what is pending and stops the Sink; later lines are written at once.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	<-s.stopped
	return nil
}

// Direct returns a writer for the program's other log lines: each Write flushes the
// pending access lines, then writes p, before it returns.
func (s *Sink) Direct() io.Writer { return direct{s} }

type direct struct{ s *Sink }

func (d direct) Write(p []byte) (int, error) {
	if err := d.s.flush(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Logger encodes access lines for a Sink.
type Logger struct {
	sink   *Sink
	format Format
	pool   sync.Pool
	now    func() time.Time // time.Now; tests fix it
}

// New returns a Logger writing lines of format to sink at level INFO.
func New(sink *Sink, format Format) *Logger {
	l := &Logger{sink: sink, format: format, now: time.Now}
	l.pool.New = func() any { return &Entry{l: l, buf: make([]byte, 0, 512)} }
	return l
}

// Entry is one line being built: add fields, then End. An Entry must not be used after End.
type Entry struct {
	l   *Logger
	buf []byte
}

// Begin starts a line with the time, level INFO and msg.
func (l *Logger) Begin(msg string) *Entry {
	e := l.pool.Get().(*Entry)
	e.buf = appendHeader(e.buf[:0], l.format, l.now(), "INFO", msg)
	return e
}

// appendHeader writes the time, level and message that start every line.
func appendHeader(b []byte, f Format, now time.Time, level, msg string) []byte {
	if f == JSON {
		b = append(b, `{"time":"`...)
		b = now.AppendFormat(b, time.RFC3339Nano)
		b = append(b, `","level":"`...)
		b = append(b, level...)
		b = append(b, `","msg":`...)
		return appendJSONString(b, msg)
	}
	b = append(b, "time="...)
	b = appendRFC3339Millis(b, now)
	b = append(b, " level="...)
	b = append(b, level...)
	b = append(b, " msg="...)
	return appendTextString(b, msg)
}

// key writes the separator and a field's key (keys are the caller's constants: plain).
func (e *Entry) key(k string) {
	if e.l.format == JSON {
		e.buf = append(e.buf, ',', '"')
		e.buf = append(e.buf, k...)
		e.buf = append(e.buf, '"', ':')
	} else {
		e.buf = append(e.buf, ' ')
		e.buf = append(e.buf, k...)
		e.buf = append(e.buf, '=')
	}
}

// Str adds a string field.
func (e *Entry) Str(k, v string) *Entry {
	e.key(k)
	if e.l.format == JSON {
		e.buf = appendJSONString(e.buf, v)
	} else {
		e.buf = appendTextString(e.buf, v)
	}
	return e
}

// AddrPort adds an address as a string ("" when it is not valid), as slog writes a
// netip.AddrPort's String.
func (e *Entry) AddrPort(k string, v netip.AddrPort) *Entry {
	if !v.IsValid() {
		return e.Str(k, "")
	}
	// An address's text needs no escaping; only an IPv6 zone could, so those go the slow way.
	if v.Addr().Zone() != "" {
		return e.Str(k, v.String())
	}
	e.key(k)
	if e.l.format == JSON {
		e.buf = append(e.buf, '"')
		e.buf = v.AppendTo(e.buf)
		e.buf = append(e.buf, '"')
	} else {
		e.buf = v.AppendTo(e.buf)
	}
	return e
}

// Int adds an integer field.
func (e *Entry) Int(k string, v int64) *Entry {
	e.key(k)
	e.buf = strconv.AppendInt(e.buf, v, 10)
	return e
}

// Dur adds a duration: nanoseconds in JSON, Duration.String in text (as slog does).
func (e *Entry) Dur(k string, v time.Duration) *Entry {
	e.key(k)
	if e.l.format == JSON {
		e.buf = strconv.AppendInt(e.buf, int64(v), 10)
	} else {
		e.buf = appendTextString(e.buf, v.String())
	}
	return e
}

// End finishes the line and hands it to the Sink.
func (e *Entry) End() {
	e.l.sink.add(e.end())
	if cap(e.buf) <= 4096 {
		e.l.pool.Put(e)
	}
}

func (e *Entry) end() []byte {
	if e.l.format == JSON {
		e.buf = append(e.buf, '}', '\n')
	} else {
		e.buf = append(e.buf, '\n')
	}
	return e.buf
}

// appendRFC3339Millis writes t as slog's text handler does: RFC 3339 with exactly three
// digits of milliseconds.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	// RFC3339Nano trims trailing zeros; adding a tenth of a millisecond to the truncated
	// time keeps four digits, and the fourth is dropped.
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	b = t.Truncate(time.Millisecond).Add(time.Millisecond/10).AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...)
}

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as a JSON string the way slog does: invalid UTF-8 becomes
// U+FFFD, control characters, quote and backslash are escaped, and so are U+2028 and
// U+2029; <, > and & are left as they are.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendTextString writes s as slog's text handler does: as it is when it needs no
// quoting, else Go-quoted.
func appendTextString(b []byte, s string) []byte {
	if needsQuoting(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// needsQuoting is slog's rule: empty, or any space, '=', '"', ASCII control character
// (not DEL), non-printing or space rune, or invalid UTF-8.
func needsQuoting(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c <= ' ' || c == '=' || c == '"' {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}
