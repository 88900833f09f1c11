package lockbroker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testEnv drives clients/testenv.py: a private redis-server and a real
// lockbrokerd, told what to do one JSON line at a time.
type testEnv struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	mu    sync.Mutex
	hello struct {
		Addr, Unix, Secret string
		Admin              string `json:"admin_secret"`
	}
}

var (
	envOnce sync.Once
	theEnv  *testEnv
	envErr  error
)

// repoRoot walks up from the test's directory to the checkout holding
// clients/testenv.py, so `go test` works from clients/go or anywhere below.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	for err == nil {
		if _, e := os.Stat(filepath.Join(dir, "clients", "testenv.py")); e == nil {
			return dir, nil
		}
		if up := filepath.Dir(dir); up != dir {
			dir = up
		} else {
			err = fmt.Errorf("no clients/testenv.py above the working directory")
		}
	}
	return "", err
}

// env starts the shared test world once, for every test that needs it.
func env(t *testing.T) *testEnv {
	envOnce.Do(func() { theEnv, envErr = startEnv() })
	if envErr != nil {
		t.Fatalf("testenv: %v", envErr)
	}
	return theEnv
}

func startEnv() (*testEnv, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	e := &testEnv{lines: make(chan string, 1)}
	e.cmd = exec.Command("python3", filepath.Join(root, "clients", "testenv.py"))
	e.cmd.Dir = root
	e.cmd.Stderr = os.Stderr
	if e.in, err = e.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := e.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err = e.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			e.lines <- sc.Text()
		}
		close(e.lines)
	}()
	first, err := e.read(60 * time.Second)
	if err == nil {
		err = json.Unmarshal([]byte(first), &e.hello)
	}
	if err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

func (e *testEnv) read(limit time.Duration) (string, error) {
	select {
	case l, ok := <-e.lines:
		if !ok {
			return "", fmt.Errorf("testenv.py exited")
		}
		return l, nil
	case <-time.After(limit):
		return "", fmt.Errorf("testenv.py said nothing for %v", limit)
	}
}

// do sends one command and returns its JSON answer, failing the test
// unless it says ok.
func (e *testEnv) do(t *testing.T, cmd string) map[string]interface{} {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var ans map[string]interface{}
	_, err := io.WriteString(e.in, cmd+"\n")
	var line string
	if err == nil {
		line, err = e.read(60 * time.Second)
	}
	if err == nil {
		err = json.Unmarshal([]byte(line), &ans)
	}
	if err == nil && ans["ok"] != true {
		err = fmt.Errorf("%v", ans["error"])
	}
	if err != nil {
		t.Fatalf("testenv %q: %v", cmd, err)
	}
	return ans
}

func (e *testEnv) holders(t *testing.T, name string) int {
	t.Helper()
	return int(e.do(t, "holders "+name)["holders"].(float64))
}

func (e *testEnv) stop() {
	e.in.Close() // end of input: testenv.py stops everything
	done := make(chan struct{})
	go func() { e.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		e.cmd.Process.Kill()
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if theEnv != nil {
		theEnv.stop()
	}
	os.Exit(code)
}

// dial opens a client of the test broker, closed with the test.
func dial(t *testing.T, e *testEnv, timeout time.Duration) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := Dial(ctx, Options{Addr: e.hello.Addr, Secret: e.hello.Secret, Timeout: timeout})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// name makes a lock name of this test alone.
func name(t *testing.T, base string) string {
	return fmt.Sprintf("go:%s:%s:%d", strings.ReplaceAll(t.Name(), "/", ":"), base, time.Now().UnixNano())
}

// eventually polls cond until it holds, failing after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

// ready waits until the broker grants (after a FLUSHALL, a Redis or broker
// restart, a grace period may still run from the scenario before).
func ready(t *testing.T, e *testEnv) {
	t.Helper()
	cl := dial(t, e, 5*time.Second)
	n := name(t, "ready")
	eventually(t, 30*time.Second, "the broker grants", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := cl.Acquire(ctx, n, Wait(0))
		if err == nil {
			l.Release(ctx)
		}
		return err == nil
	})
	cl.Close()
}

// brokerStat reads one INFO value through cl.
func brokerStat(t *testing.T, cl *Client, key string) int {
	t.Helper()
	lines, err := cl.line(context.Background(), "INFO", true, false)
	if err != nil {
		t.Fatalf("INFO: %v", err)
	}
	for _, l := range lines {
		if f := fields(l); len(f) == 3 && f[0] == "STAT" && f[1] == key {
			n, _ := strconv.Atoi(f[2])
			return n
		}
	}
	t.Fatalf("INFO has no %s", key)
	return 0
}

// blockedConns counts cl's connections with a wait in flight.
func blockedConns(cl *Client) (n int) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, cn := range cl.conns {
		if cn.blocked != nil {
			n++
		}
	}
	return n
}
