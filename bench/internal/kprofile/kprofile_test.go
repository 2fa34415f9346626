package kprofile

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/sample.golden from the current output")

// testdata/sample.perf holds real samples of four proxies under the bench's conns test
// (perf script -F comm,ip,sym,dso), one of each kind the classes must tell apart: system
// calls by their outermost entry point whichever of them inlining left, a close finished
// on the way back to user space, a socket's write against an access log's, page faults,
// timer interrupts, user space, and the system call entry itself.
func TestReadGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/sample.perf")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for i, s := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		c, err := Read(strings.NewReader(s))
		if err != nil {
			t.Fatalf("sample %d: %v", i+1, err)
		}
		if c.Total != 1 || len(c.ByClass) != 1 {
			t.Fatalf("sample %d counted as %+v, want one sample", i+1, c)
		}
		lines := strings.Split(s, "\n")
		top, _ := parseFrame(lines[1])
		for class := range c.ByClass {
			fmt.Fprintf(&out, "%-9s %-40s %s\n", strings.TrimSpace(lines[0]), top.sym, class)
		}
	}
	all, err := Read(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&out, "\nall: %d samples\n", all.Total)
	for _, class := range Classes {
		if n := all.ByClass[class]; n > 0 {
			fmt.Fprintf(&out, "%-28s %d\n", class, n)
		}
	}
	for class := range all.ByClass {
		if !slices.Contains(Classes, class) {
			t.Errorf("class %q is not in Classes", class)
		}
	}
	const golden = "testdata/sample.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("classes differ from %s (go test -update to rewrite):\n%s", golden, out.String())
	}
}

func TestReadRejectsBadFrames(t *testing.T) {
	for _, in := range []string{
		"snigate\n\tzz12 foo ([kernel.kallsyms])\n",
		"snigate\n\tffffffff81000130\n",
	} {
		if _, err := Read(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%q: error %v, want one naming line 2", in, err)
		}
	}
}

// A recording of a whole CPU has the idle task's samples too; ReadExcept leaves them out,
// and the sample after a skipped one still counts.
func TestReadExceptSkipsCommands(t *testing.T) {
	b, err := os.ReadFile("testdata/sample.perf")
	if err != nil {
		t.Fatal(err)
	}
	one := strings.Split(strings.TrimSpace(string(b)), "\n\n")[0]
	_, frames, _ := strings.Cut(one, "\n")
	idle := "swapper     0 [000]\n" + frames
	in := idle + "\n\n" + one + "\n\n" + idle + "\n"
	all, err := Read(strings.NewReader(in))
	if err != nil || all.Total != 3 {
		t.Fatalf("Read: %d samples, %v; want 3", all.Total, err)
	}
	busy, err := ReadExcept(strings.NewReader(in), "swapper")
	if err != nil || busy.Total != 1 {
		t.Fatalf("ReadExcept: %d samples, %v; want 1", busy.Total, err)
	}
}
