package clienthello

// A small ClientHello builder for synthetic cases that no real client produces.

type ext struct {
	typ  uint16
	data []byte
}

type chSpec struct {
	version    uint16
	sessionID  []byte
	suites     []byte // raw cipher_suites vector body
	comp       []byte // raw compression_methods vector body
	exts       []ext
	noExtBlock bool   // omit the extensions block entirely (pre-TLS 1.2 style)
	extTail    []byte // raw bytes appended inside the extension block
}

func defaultSpec(exts ...ext) chSpec {
	return chSpec{
		version:   0x0303,
		sessionID: make([]byte, 32),
		suites:    []byte{0x13, 0x01, 0xc0, 0x2f},
		comp:      []byte{0},
		exts:      exts,
	}
}

func appendU16(b []byte, v int) []byte { return append(b, byte(v>>8), byte(v)) }

// msg returns the handshake message: 4-byte header and ClientHello body.
func (c chSpec) msg() []byte {
	b := appendU16(nil, int(c.version))
	b = append(b, make([]byte, 32)...) // random
	b = append(b, byte(len(c.sessionID)))
	b = append(b, c.sessionID...)
	b = appendU16(b, len(c.suites))
	b = append(b, c.suites...)
	b = append(b, byte(len(c.comp)))
	b = append(b, c.comp...)
	if !c.noExtBlock {
		var e []byte
		for _, x := range c.exts {
			e = appendU16(e, int(x.typ))
			e = appendU16(e, len(x.data))
			e = append(e, x.data...)
		}
		e = append(e, c.extTail...)
		b = appendU16(b, len(e))
		b = append(b, e...)
	}
	return append([]byte{handshakeTypeClientHello, byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
}

// record frames c as a single TLS 1.0 record, the way most clients send it.
func (c chSpec) record() []byte { return frame(c.msg(), 1, every(MaxRecordLen)) }

type sniEntry struct {
	typ  byte
	name string
}

func sniExt(names ...string) ext {
	var es []sniEntry
	for _, n := range names {
		es = append(es, sniEntry{0, n})
	}
	return sniEntries(es...)
}

func sniEntries(es ...sniEntry) ext {
	var l []byte
	for _, e := range es {
		l = append(l, e.typ)
		l = appendU16(l, len(e.name))
		l = append(l, e.name...)
	}
	return ext{extServerName, append(appendU16(nil, len(l)), l...)}
}

func alpnExt(protos ...string) ext {
	var l []byte
	for _, p := range protos {
		l = append(l, byte(len(p)))
		l = append(l, p...)
	}
	return ext{extALPN, append(appendU16(nil, len(l)), l...)}
}

func versionsExt(vs ...uint16) ext {
	d := []byte{byte(2 * len(vs))}
	for _, v := range vs {
		d = appendU16(d, int(v))
	}
	return ext{extSupportedVersions, d}
}
