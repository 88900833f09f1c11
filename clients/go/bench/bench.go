// Command bench measures uncontended acquire/release cycles per second, and
// the CPU seconds this client process spends per cycle, against one broker:
// $LOCKBROKER_ADDR (and $LOCKBROKER_SECRET), or else a private one started
// with clients/testenv.py. It prints one JSON line.
//
//	go run ./bench [-workers 8] [-duration 5s]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"lockbroker.example/lockbroker"
)

func main() {
	workers := flag.Int("workers", 8, "concurrent workers, each on a name of its own")
	duration := flag.Duration("duration", 5*time.Second, "how long to run")
	flag.Parse()
	opts := lockbroker.Options{}
	if os.Getenv("LOCKBROKER_ADDR") == "" {
		stop, addr, secret := testenv()
		defer stop()
		opts = lockbroker.Options{Addr: addr, Secret: secret}
	}
	ctx := context.Background()
	cl, err := lockbroker.Dial(ctx, opts)
	check(err)
	defer cl.Close()

	var cycles int64
	var wg sync.WaitGroup
	cpu0, start := cpuSeconds(), time.Now()
	end := start.Add(*duration)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			name := fmt.Sprintf("bench-go-%d-%d", os.Getpid(), w)
			for time.Now().Before(end) {
				l, err := cl.Acquire(ctx, name)
				check(err)
				check(l.Release(ctx))
				atomic.AddInt64(&cycles, 1)
			}
		}(w)
	}
	wg.Wait()
	secs, cpu := time.Since(start).Seconds(), cpuSeconds()-cpu0
	out, _ := json.Marshal(map[string]interface{}{
		"client": "go", "workers": *workers, "seconds": secs, "cycles": cycles,
		"cycles_per_s": float64(cycles) / secs, "cpu_s_per_cycle": cpu / float64(cycles),
	})
	fmt.Println(string(out))
}

// cpuSeconds is this process's user and system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// testenv starts clients/testenv.py (found above the working directory).
func testenv() (stop func(), addr, secret string) {
	dir, _ := os.Getwd()
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "clients", "testenv.py")); err == nil {
			break
		}
		if dir == filepath.Dir(dir) {
			check(fmt.Errorf("set LOCKBROKER_ADDR, or run me inside the lockbroker checkout"))
		}
	}
	cmd := exec.Command("python3", filepath.Join(dir, "clients", "testenv.py"))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	check(err)
	out, err := cmd.StdoutPipe()
	check(err)
	check(cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	check(err)
	var hello struct{ Addr, Secret string }
	check(json.Unmarshal([]byte(line), &hello))
	return func() { in.Close(); cmd.Wait() }, hello.Addr, hello.Secret
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
