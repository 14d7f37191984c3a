// Command tearwriter rewrites a transfer file in place as fast as it can,
// the way the daemon records progress: through hashfile.Store, changing
// only WRITTEN, to a value of another length each time so that the image
// changes size and is rewritten from its header on. It prints "ready" once
// its first rewrite is durable. The tear test kills it at random instants.
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/scr-transferd/scr-transferd/hashfile"
	"github.com/scr-transferd/scr-transferd/transfer"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: tearwriter TRANSFER_FILE")
		os.Exit(2)
	}
	s := hashfile.NewStore(os.Args[1], hashfile.Flock)
	for n := 0; ; n++ {
		if _, _, err := s.Update(raise); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if n == 0 {
			fmt.Println("ready")
		}
	}
}

// raise sets every WRITTEN to a random value no greater than SIZE.
func raise(t *hashfile.Tree) error {
	files := t.Get(transfer.KeyFiles)
	if files == nil {
		return fmt.Errorf("no %s in the transfer file", transfer.KeyFiles)
	}
	for _, e := range files.All() {
		size, _, err := e.Uint(transfer.KeySize)
		if err != nil {
			return err
		}
		digits := 1 + rand.IntN(len(strconv.FormatUint(size, 10)))
		v := rand.Uint64N(min(size+1, pow10(digits)))
		e.SetUint(transfer.KeyWritten, v)
	}
	return nil
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}
