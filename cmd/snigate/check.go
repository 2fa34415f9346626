package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/snigate/snigate/internal/source/file"
	"github.com/snigate/snigate/internal/translate"
)

// check validates manifests without serving. It prints every object's status conditions and
// the effective routing table (writeReport), then the problems, and returns exit
// code 1 when the input is rejected or any condition reports a problem.
func check(args []string, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var paths pathsFlag
	fs.Var(&paths, "f", "manifest file or folder (repeatable)")
	bind := fs.String("bind", "0.0.0.0", "bind address for Gateways without an IPAddress in spec.addresses")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if len(paths) == 0 {
		return 2, fmt.Errorf("check: -f PATH is required")
	}
	res, err := file.Load(paths...)
	if err != nil {
		return 1, err
	}
	r := translate.Translate(res, translate.Options{DefaultBindAddress: *bind, Generation: 1})
	if len(r.Errors) == 0 {
		if err := writeReport(out, res, r); err != nil {
			return 1, err
		}
	}
	if list := problems(r); len(list) > 0 {
		fmt.Fprintf(out, "\n%d problem(s):\n", len(list))
		for _, p := range list {
			fmt.Fprintln(out, "  -", p)
		}
		return 1, nil
	}
	return 0, nil
}
