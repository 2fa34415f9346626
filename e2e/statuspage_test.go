package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/snigate/snigate/internal/testutil"
)

// The admin status page in a real headless Chromium (Debian's chromium, driven over the
// DevTools protocol by chromedp): it loads without a console error, a failed request or a
// script exception; it reloads itself, so a route added to the files after start shows up
// without a click; a route's open connections are live (one held open shows 1, 0 once
// closed); an AccessPolicy added to a route is named on its row, with the connections it
// refused. SNIGATE_SCREENSHOT=file.png saves what the browser saw.
func TestStatusPageInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	testutil.Require(t, "chromium (Debian package chromium, scripts/install-test-deps.sh)", err)
	ca := testutil.NewCA(t)
	port := testutil.FreePorts(t, 1)[0]
	dir := configDir(t)
	backend := serviceYAML("svc-a", startEcho(t, "echo-a", ca.Issue(t, "a.test", "b.test")))
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("first", "tls", []string{"a.test"}, to("svc-a")),
		backend,
	))
	g := startGateway(t, dir)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
		// Root in CI has no user namespace sandbox to drop into; the machine's network is
		// closed, so nothing Chromium would fetch for itself may even be tried.
		chromedp.NoSandbox,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	var mu sync.Mutex
	var problems []string
	// The listener is on before the tab's first command, so it sees every event.
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				problems = append(problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+ev.ExceptionDetails.Text)
		case *cdplog.EventEntryAdded:
			// Failed loads (a 404 favicon), Content-Security-Policy violations and the like.
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("log %s (%s): %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	}))
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()
	// The first Do starts the browser and attaches the tab (the runtime domain on); the
	// log domain, which reports failed loads, is turned on before the page loads.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("Log.enable: %v", err)
	}
	page := "http://" + g.admin + "/?refresh=1"
	if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("opening %s in Chromium: %v", page, err)
	}

	// cellOf reads, from the page as the browser shows it, the cell of route's row under the
	// header column ("" when there is no such row).
	cellOf := func(route, column string) string {
		js := fmt.Sprintf(`(() => { for (const tr of document.querySelectorAll("table.routes tr")) {
			const c = tr.querySelector("td.route"); if (!c || c.textContent.trim() !== %q) continue;
			const heads = [...tr.closest("table").querySelectorAll("th")].map(th => th.textContent.trim());
			return tr.children[heads.indexOf(%q)].textContent.trim(); }
			return ""; })()`, route, column)
		// The page may be between two loads: a failed evaluation is "not there yet".
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			return ""
		}
		return got
	}
	openOf := func(route string) string { return cellOf(route, "Open") }
	waitCell := func(what, route, column, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := cellOf(route, column)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
				t.Fatalf("%s: the page shows %s %q for %s, want %q; it reads:\n%s", what, column, got, route, want, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitOpen := func(what, route, want string) { t.Helper(); waitCell(what, route, "Open", want) }
	waitOpen("at start", "TLSRoute/default/first", "0")
	if openOf("TLSRoute/default/second") != "" {
		t.Fatal("a route not yet written is on the page")
	}

	// A route added after start appears by the page's own reload.
	gen := g.generation(t)
	writeFile(t, dir, "gateway.yaml", docs(
		gatewayYAML(passthrough("tls", port, "")),
		routeYAML("first", "tls", []string{"a.test"}, to("svc-a")),
		routeYAML("second", "tls", []string{"b.test"}, to("svc-a")),
		backend,
	))
	g.waitGeneration(t, gen)
	waitOpen("after the route was added", "TLSRoute/default/second", "0")

	// A connection held open on it counts, live.
	s := dialTLS(t, port, ca.ClientConfig("b.test"))
	waitOpen("with a connection open", "TLSRoute/default/second", "1")
	s.roundTrip("ping\n")
	s.finish()
	s.raw.Close()
	waitOpen("after the connection closed", "TLSRoute/default/second", "0")

	// An AccessPolicy on it: the page names it, and counts the connection it refuses.
	gen = g.generation(t)
	writeFile(t, dir, "access.yaml", accessPolicyYAML("second", "TLSRoute", "second", "", "  sourceRanges: [127.0.0.1/32]"))
	g.waitGeneration(t, gen)
	waitCell("with an AccessPolicy", "TLSRoute/default/second", "Access", "default/second")
	waitCell("with an AccessPolicy, nothing refused yet", "TLSRoute/default/second", "Refused", "0")
	refusedFrom(t, "127.0.0.2", port, ca.ClientConfig("b.test"))
	waitCell("after a refusal", "TLSRoute/default/second", "Refused", "1")

	if path := os.Getenv("SNIGATE_SCREENSHOT"); path != "" {
		if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(90)); err != nil {
			t.Errorf("screenshot: %v", err)
		} else if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Error(err)
		}
	}
	// Let one more reload happen, so its messages are in too.
	time.Sleep(1500 * time.Millisecond)
	if nodes, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSS("header h1"))); err != nil || len(nodes) != 1 {
		t.Errorf("the page's header after its reloads: %d nodes, %v", len(nodes), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the browser reported:\n%s", strings.Join(problems, "\n"))
	}
}
