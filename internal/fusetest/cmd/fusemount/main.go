// Command fusemount serves a directory through internal/fusetest until
// SIGTERM or SIGINT, for scripts and benchmarks that need the FUSE server
// in a process of its own:
//
//	fusemount -locks nodelocal|none|kernel -bw BYTES_PER_SEC BACKING MOUNTPOINT
//
// It prints "ready" on standard output once the mount serves.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/scr-transferd/scr-transferd/internal/fusetest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fusemount:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("fusemount", flag.ContinueOnError)
	locks := fl.String("locks", "kernel", "lock mode: kernel, nodelocal or none")
	bw := fl.Float64("bw", 0, "bandwidth of the mount's writes in bytes/s (0: unlimited)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 2 {
		return fmt.Errorf("usage: fusemount [-locks MODE] [-bw BYTES_PER_SEC] BACKING MOUNTPOINT")
	}
	mode, err := fusetest.ParseLockMode(*locks)
	if err != nil {
		return err
	}
	opts := fusetest.Options{Locks: mode}
	if *bw > 0 {
		opts.Bucket = fusetest.NewBucket(*bw)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	s, err := fusetest.Mount(fl.Arg(0), fl.Arg(1), opts)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	<-sigs
	return s.Close()
}
