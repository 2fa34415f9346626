package httpproxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/snigate/snigate/internal/snapshot"
)

func TestPrefixMatchesWholeSegments(t *testing.T) {
	for _, tc := range []struct {
		prefix, path string
		want         bool
	}{
		{"/", "/anything", true},
		{"/api", "/api", true},
		{"/api", "/api/", true},
		{"/api", "/api/v1", true},
		{"/api", "/apix", false},
		{"/api", "/ap", false},
	} {
		if got := prefixMatches(tc.prefix, tc.path); got != tc.want {
			t.Errorf("prefixMatches(%q, %q) = %v, want %v", tc.prefix, tc.path, got, tc.want)
		}
	}
}

func TestMatchTakesFirstInPrecedenceOrder(t *testing.T) {
	rule := func(i int) *snapshot.HTTPRule { return &snapshot.HTTPRule{Index: i} }
	host := &snapshot.HTTPHost{Matches: []*snapshot.HTTPMatch{
		{PathType: snapshot.PathExact, Path: "/login", Rule: rule(0)},
		{PathType: snapshot.PathPrefix, Path: "/api", Method: "POST", Rule: rule(1)},
		{PathType: snapshot.PathPrefix, Path: "/api", Headers: []snapshot.NameValue{{Name: "X-V", Value: "2"}}, Rule: rule(2)},
		{PathType: snapshot.PathPrefix, Path: "/api", Query: []snapshot.NameValue{{Name: "debug", Value: "1"}}, Rule: rule(3)},
		{PathType: snapshot.PathPrefix, Path: "/", Rule: rule(4)},
	}}
	for _, tc := range []struct {
		method, url string
		header      http.Header
		want        int
	}{
		{"GET", "/login", nil, 0},
		{"GET", "/login/x", nil, 4},
		{"POST", "/api/x", http.Header{"X-V": {"2"}}, 1},
		{"GET", "/api/x", http.Header{"X-V": {"2"}}, 2},
		{"GET", "/api/x?debug=1", nil, 3},
		{"GET", "/api/x?debug=2", nil, 4},
	} {
		r := httptest.NewRequest(tc.method, tc.url, nil)
		for k, v := range tc.header {
			r.Header[k] = v
		}
		m := match(host, r)
		if m == nil || m.Rule.Index != tc.want {
			t.Errorf("%s %s %v: got %+v, want rule %d", tc.method, tc.url, tc.header, m, tc.want)
		}
	}
}

func TestRedirectLocation(t *testing.T) {
	prefixAPI := &snapshot.HTTPMatch{PathType: snapshot.PathPrefix, Path: "/api"}
	for _, tc := range []struct {
		url  string
		rd   snapshot.Redirect
		m    *snapshot.HTTPMatch
		port int32
		tls  bool
		want string
	}{
		{"http://a.test/x?q=1", snapshot.Redirect{Scheme: "https"}, prefixAPI, 80, false, "https://a.test/x?q=1"},
		{"http://a.test:8080/x", snapshot.Redirect{Scheme: "https"}, prefixAPI, 8080, false, "https://a.test/x"},
		{"http://a.test:8080/x", snapshot.Redirect{}, prefixAPI, 8080, false, "http://a.test:8080/x"},
		{"http://a.test/x", snapshot.Redirect{Hostname: "b.test", Port: 8443, Scheme: "https"}, prefixAPI, 80, false, "https://b.test:8443/x"},
		{"https://a.test/x", snapshot.Redirect{}, prefixAPI, 443, true, "https://a.test/x"},
		{"http://a.test/api/v1", snapshot.Redirect{PathType: "ReplacePrefixMatch", Path: "/v2"}, prefixAPI, 80, false, "http://a.test/v2/v1"},
		{"http://a.test/api", snapshot.Redirect{PathType: "ReplacePrefixMatch", Path: "/"}, prefixAPI, 80, false, "http://a.test/"},
		{"http://a.test/api/v1", snapshot.Redirect{PathType: "ReplacePrefixMatch", Path: "/"}, prefixAPI, 80, false, "http://a.test/v1"},
		{"http://a.test/api/v1", snapshot.Redirect{PathType: "ReplaceFullPath", Path: "/new"}, prefixAPI, 80, false, "http://a.test/new"},
	} {
		r := httptest.NewRequest("GET", tc.url, nil)
		if got := redirectLocation(r, &tc.rd, tc.m, tc.port, tc.tls); got != tc.want {
			t.Errorf("%s %+v: got %s, want %s", tc.url, tc.rd, got, tc.want)
		}
	}
}

func TestPickBackendStatus(t *testing.T) {
	if b, code := pickBackend(nil); b != nil || code != 500 {
		t.Errorf("no backends: %v %d, want 500", b, code)
	}
	idle := snapshot.NewRoute("r", []snapshot.Backend{{Name: "idle", Weight: 1, Reason: ReasonNoReadyEndpoints}})
	if _, code := pickBackend(idle); code != 503 {
		t.Errorf("no ready endpoints: %d, want 503", code)
	}
	bad := snapshot.NewRoute("r", []snapshot.Backend{{Name: "bad", Weight: 1, Reason: "BackendNotFound"}})
	if _, code := pickBackend(bad); code != 500 {
		t.Errorf("invalid backend: %d, want 500", code)
	}
	zero := snapshot.NewRoute("r", []snapshot.Backend{{Name: "z", Weight: 0}})
	if _, code := pickBackend(zero); code != 500 {
		t.Errorf("all weights zero: %d, want 500", code)
	}
}

func TestHostOnly(t *testing.T) {
	for in, want := range map[string]string{"a.test": "a.test", "a.test:8080": "a.test", "[::1]:80": "::1", "127.0.0.1:80": "127.0.0.1"} {
		if got := hostOnly(in); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
}
