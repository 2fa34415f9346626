// Package soak is the soak benchmark (bench/soak.sh): `snigate serve` for 30 minutes under
// mixed traffic — held streams echoed and checked byte for byte, short connections to a
// backend that stays and to one killed and restarted every minute — with a configuration
// reload every 10 s and a live upgrade every 5 minutes. The serving process's file
// descriptors, goroutines and RSS are sampled every minute (whichever process serves: the
// pid file follows the upgrades) and judged bounded when nothing after the first 5 minutes
// passes the sample at 5 minutes. It fails on errors (a lost or changed byte, a failed
// connection to the backend that stays, a failed upgrade), never on the bounds, which it
// reports.
package soak
