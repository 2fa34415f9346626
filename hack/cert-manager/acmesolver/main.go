// Command acmesolver is cert-manager's HTTP-01 solver (v1.21.2): the process a solver Pod
// runs, answering /.well-known/acme-challenge/<token> with the key for one domain.
//
// Why this file exists: upstream's main (cmd/acmesolver) is a module never published to the
// Go module proxy; the solver itself is the public package pkg/issuer/acme/http/solver,
// which this wraps with the same flags the controller puts in the Pod's arguments.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/issuer/acme/http/solver"
)

func main() {
	s := &solver.HTTP01Solver{}
	flag.IntVar(&s.ListenPort, "listen-port", 8089, "port to listen on")
	flag.StringVar(&s.Domain, "domain", "", "the domain name to answer for")
	flag.StringVar(&s.Token, "token", "", "the challenge token")
	flag.StringVar(&s.Key, "key", "", "the challenge key")
	version := flag.Bool("version", false, "print the version and exit")
	klog.InitFlags(nil)
	flag.Parse()
	if *version {
		fmt.Println("cert-manager-acmesolver v1.21.2")
		return
	}
	if err := s.Listen(klog.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "acmesolver:", err)
		os.Exit(1)
	}
}
