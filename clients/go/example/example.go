// Command example runs a job under a lock and prints its fence.
//
//	LOCKBROKER_ADDR=127.0.0.1:7878 LOCKBROKER_SECRET=... go run ./example
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"lockbroker.example/lockbroker"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := lockbroker.Dial(ctx, lockbroker.Options{}) // $LOCKBROKER_ADDR, $LOCKBROKER_SECRET
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(69)
	}
	defer cl.Close()
	lease, err := cl.Acquire(ctx, "example-job", lockbroker.Wait(10*time.Second))
	if errors.Is(err, lockbroker.ErrBusy) {
		fmt.Fprintln(os.Stderr, "example-job: lock busy")
		os.Exit(75)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(69)
	}
	work, stop := lease.Context(ctx) // cancelled if the lock is lost
	defer stop()
	fmt.Println("holding example-job with fence", lease.Fence())
	select { // the job: send the fence with every write it makes
	case <-time.After(500 * time.Millisecond):
	case <-work.Done():
		fmt.Fprintln(os.Stderr, "lost:", lease.LostReason())
		os.Exit(66)
	}
	if err := lease.Release(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
	}
}
