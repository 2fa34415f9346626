package report

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

var colors = map[string]string{
	"direct": "#9e9e9e", "snigate": "#1b7f3b", "haproxy": "#1f5fbf", "nginx": "#8a3fbf", "sniproxy": "#c0641f",
}

type panel struct {
	title, test, name, unit string
	scale                   float64
}

// SVG draws one horizontal bar chart per key metric: a bar per proxy at the median, a line
// from min to max. Plain SVG 1.1, no scripts, no external fonts.
func (r *Results) SVG() string {
	panels := []panel{
		{"Proxy CPU per new connection", TConns, MCPU, "µs", 1},
		{"Proxy CPU per GiB, bulk", TBulk, MCPUGiB, "s", 1},
		{"Added latency p50, 64-byte echo", TLatency, MAddP50, "µs", 1},
		{"Memory per idle connection", TIdle, MRSSConn, "KB", 1.0 / 1024},
		{"Proxy CPU per TLS handshake", TTerm, MCPU, "µs", 1},
	}
	const (
		width  = 760
		left   = 90
		right  = 90
		barH   = 16
		gap    = 6
		titleH = 26
	)
	var body strings.Builder
	y := 48
	for _, p := range panels {
		var rows []*Metric
		for _, t := range Order {
			if m := r.Get(p.test, p.name, t); m != nil && len(m.Values) > 0 {
				rows = append(rows, m)
			}
		}
		if len(rows) == 0 {
			continue
		}
		maxv := 0.0
		for _, m := range rows {
			maxv = math.Max(maxv, m.Max*p.scale)
		}
		if maxv <= 0 {
			maxv = 1
		}
		fmt.Fprintf(&body, `<text x="10" y="%d" font-size="14" font-weight="bold">%s (%s, lower is better)</text>`+"\n",
			y+16, html.EscapeString(p.title), p.unit)
		y += titleH
		plotW := float64(width - left - right)
		for _, m := range rows {
			x := func(v float64) float64 { return left + math.Max(v*p.scale, 0)/maxv*plotW }
			fmt.Fprintf(&body, `<text x="%d" y="%d" font-size="12" text-anchor="end">%s</text>`+"\n", left-6, y+12, m.Target)
			fmt.Fprintf(&body, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, x(m.Median)-left, barH, colors[m.Target])
			if m.Min != m.Max {
				fmt.Fprintf(&body, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000" stroke-width="1.5"/>`+"\n", x(m.Min), x(m.Max), y+barH/2, y+barH/2)
			}
			fmt.Fprintf(&body, `<text x="%.1f" y="%d" font-size="12">%s</text>`+"\n", x(m.Max)+6, y+12, fmtNum(m.Median*p.scale))
			y += barH + gap
		}
		y += 12
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", width, y+30, width, y+30)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15">snigate vs peers — %s, %d × %s, %s mode, %d rounds</text>`+"\n",
		html.EscapeString(r.Date[:min(10, len(r.Date))]), r.Machine.NProc, html.EscapeString(shortCPU(r.Machine.CPU)), r.Mode, r.Rounds)
	fmt.Fprintf(&b, `<text x="10" y="36" font-size="11" fill="#555">bar: median; line: minimum to maximum over the rounds</text>`+"\n")
	b.WriteString(body.String())
	b.WriteString("</svg>\n")
	return b.String()
}

func shortCPU(s string) string {
	if len(s) > 40 {
		return s[:40]
	}
	return s
}

func fmtNum(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// WriteSVG writes the chart to path.
func (r *Results) WriteSVG(path string) error {
	return os.WriteFile(path, []byte(r.SVG()), 0o644)
}
