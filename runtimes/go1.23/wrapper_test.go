// Tests for main.go: the wrapper is built with sless-build, as the image
// builds it, around a small function package, and each test runs the
// binary and calls it over HTTP. Only main.go and sless-build go into an
// image or a build; this file is not copied anywhere.
//
// Run from the repository root (a Go toolchain on PATH; skipped without):
//
//	go test runtimes/go1.23/wrapper_test.go
package wrapper_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const deadline = 20 * time.Second

// The function: a package of its own, its files written to a temporary
// directory.
const handlerGo = `package handler

import (
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
)

func init() { fmt.Println("printed by init") }

type Event struct {
	Path  string            ` + "`json:\"path\"`" + `
	Query map[string]string ` + "`json:\"query\"`" + `
}

func Prints(e Event) string {
	fmt.Println("to stdout")
	fmt.Fprintln(os.Stderr, "to stderr")
	log.Print("from log")
	fmt.Print("two\nlines\n")
	fmt.Print("y")
	fmt.Print("x")
	return "printed"
}

var release = make(chan struct{})

// Long writes a long line without its newline, then waits for a call to
// /release.
func Long(e Event) string {
	if e.Path == "/release" {
		close(release)
		return "released"
	}
	fmt.Print(strings.Repeat("y", 20000))
	<-release
	return "long"
}

func Fails(e Event) error {
	fmt.Println("before the failure")
	return errors.New("no such record")
}

func Panics(e Event) string {
	var list []int
	return fmt.Sprint(list[3])
}

func Fatal(e Event) string {
	log.Fatal("cannot go on")
	return "unreachable"
}

// Two calls meet here twice: each writes while the other is in flight.
var (
	mu      sync.Mutex
	waiting []chan struct{}
)

func meet() {
	mu.Lock()
	ch := make(chan struct{})
	waiting = append(waiting, ch)
	if len(waiting) == 2 {
		for _, w := range waiting {
			close(w)
		}
		waiting = nil
	}
	mu.Unlock()
	<-ch
}

func Together(e Event) string {
	n := e.Query["n"]
	fmt.Println("a-" + n)
	meet()
	fmt.Println("b-" + n)
	meet()
	return n
}
`

var (
	buildOnce sync.Once
	buildDir  string
	binary    string
	codeDir   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// build compiles the wrapper with the function once for all tests.
func build(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no Go toolchain on PATH")
	}
	buildOnce.Do(func() {
		_, self, _, _ := runtime.Caller(0)
		here := filepath.Dir(self)
		buildDir, buildErr = os.MkdirTemp("", "sless-go-wrapper-test-")
		if buildErr != nil {
			return
		}
		codeDir = filepath.Join(buildDir, "code")
		binary = filepath.Join(buildDir, "function")
		os.MkdirAll(codeDir, 0o755)
		os.WriteFile(filepath.Join(codeDir, "go.mod"), []byte("module function\n\ngo 1.21\n"), 0o644)
		os.WriteFile(filepath.Join(codeDir, "handler.go"), []byte(handlerGo), 0o644)
		cmd := exec.Command("sh", filepath.Join(here, "sless-build"), binary)
		cmd.Env = append(os.Environ(), "SLESS_CODE_DIR="+codeDir, "SLESS_GO_WRAPPER="+filepath.Join(here, "main.go"),
			"GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("sless-build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// output collects what the process writes on one stream.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

type wrapper struct {
	port           int
	stdout, stderr *output
	exited         chan error
}

// start runs the built function with `entrypoint` and waits until it is
// healthy.
func start(t *testing.T, entrypoint string) *wrapper {
	build(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	w := &wrapper{port: port, stdout: &output{}, stderr: &output{}, exited: make(chan error, 1)}
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), "SLESS_PORT="+strconv.Itoa(port), "SLESS_HOST=127.0.0.1",
		"SLESS_CODE_DIR="+codeDir, "SLESS_ENTRYPOINT="+entrypoint)
	cmd.Stdout, cmd.Stderr = w.stdout, w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	w.waitFor(t, "healthy", func() bool {
		res, err := http.Get(w.url("/__sless/health"))
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == 200
	})
	return w
}

func (w *wrapper) url(path string) string {
	return "http://127.0.0.1:" + strconv.Itoa(w.port) + path
}

// get makes a request naming the call `id` (none when ""); returns the
// status and body.
func (w *wrapper) get(path, id string) (int, string, error) {
	req, _ := http.NewRequest("GET", w.url(path), nil)
	if id != "" {
		req.Header.Set("Sless-Invocation-Id", id)
	}
	client := http.Client{Timeout: deadline}
	res, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s: %v\nstderr:\n%s", path, err, w.stderr)
	}
	defer res.Body.Close()
	var body bytes.Buffer
	_, err = body.ReadFrom(res.Body)
	return res.StatusCode, body.String(), err
}

// call is get in the test's goroutine.
func (w *wrapper) call(t *testing.T, path, id string) (int, string) {
	t.Helper()
	status, body, err := w.get(path, id)
	if err != nil {
		t.Fatal(err)
	}
	return status, body
}

// waitFor waits until check() holds: the relay writes on its own time.
func (w *wrapper) waitFor(t *testing.T, what string, check func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !check() {
		if time.Now().After(end) {
			t.Fatalf("not %s after %s\nstdout:\n%q\nstderr:\n%q", what, deadline, w.stdout, w.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// marked is the lines of text marked with id, without the mark.
func marked(text, id string) []string {
	var lines []string
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "\x1e"+id+"\x1f"); ok {
			lines = append(lines, rest)
		}
	}
	return lines
}

func unmarked(text string) []string {
	var lines []string
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if !strings.HasPrefix(line, "\x1e") {
			lines = append(lines, line)
		}
	}
	return lines
}

func uuid(n int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", n, time.Now().UnixNano()&0xffffffffffff)
}

func TestACallsLinesAreMarkedWithItsIDOnTheirOwnStream(t *testing.T) {
	w := start(t, "handler.Prints")
	id := uuid(1)
	if status, body := w.call(t, "/", strings.ToUpper(id)); status != 200 || body != "printed" {
		t.Fatalf("got %d %q", status, body)
	}
	want := []string{"to stdout", "two", "lines", "yx"}
	w.waitFor(t, "marked", func() bool {
		return len(marked(w.stdout.String(), id)) == len(want) && strings.Contains(w.stderr.String(), "GET / 200")
	})
	if got := marked(w.stdout.String(), id); !slices.Equal(got, want) {
		t.Errorf("stdout marked %q, want %q", got, want)
	}
	err := marked(w.stderr.String(), id)
	if len(err) != 2 || err[0] != "to stderr" || !strings.HasSuffix(err[1], " from log") {
		t.Errorf("stderr marked %q", err)
	}
	// Printed by init, or by the wrapper (its access log): unmarked.
	if got := unmarked(w.stdout.String()); !slices.Equal(got, []string{"printed by init"}) {
		t.Errorf("stdout unmarked %q", got)
	}
	if got := strings.Join(unmarked(w.stderr.String()), "\n"); !strings.Contains(got, "GET / 200 ") {
		t.Errorf("stderr unmarked %q", got)
	}
}

func TestAHeaderThatIsNoUUIDLeavesTheLinesUnmarked(t *testing.T) {
	w := start(t, "handler.Prints")
	for _, id := range []string{"not-a-uuid", uuid(2)[1:], uuid(2) + "0", strings.Replace(uuid(2), "-", "x", 1)} {
		if status, _ := w.call(t, "/", id); status != 200 {
			t.Fatalf("got %d", status)
		}
	}
	w.waitFor(t, "printed", func() bool { return strings.Count(w.stdout.String(), "yx\n") == 4 })
	if text := w.stdout.String() + w.stderr.String(); strings.Contains(text, "\x1e") {
		t.Errorf("marked: %q", text)
	}
}

func TestAnOpenLineIsWrittenAsALineOfItsOwnPast16KiB(t *testing.T) {
	w := start(t, "handler.Long")
	id := uuid(7)
	answered := make(chan error, 1)
	go func() {
		status, _, err := w.get("/", id)
		if err == nil && status != 200 {
			err = fmt.Errorf("got %d", status)
		}
		answered <- err
	}()
	// While the call waits: one read of the pipe may take less than all
	// of it, so the line is at least past 16 KiB.
	w.waitFor(t, "written past 16 KiB", func() bool {
		for _, line := range marked(w.stdout.String(), id) {
			if len(line) > 16*1024 && strings.Trim(line, "y") == "" {
				return true
			}
		}
		return false
	})
	if status, body := w.call(t, "/release", ""); status != 200 || body != "released" {
		t.Fatalf("release: got %d %q", status, body)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
}

func TestACallsTraceparentFollowsItsIDInTheMark(t *testing.T) {
	w := start(t, "handler.Prints")
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ids := []string{uuid(1), uuid(2)}
	// The second's is not well formed: left out, the id stays.
	for i, traceparent := range []string{tp, strings.ToUpper(tp)} {
		req, _ := http.NewRequest("GET", w.url("/"), nil)
		req.Header.Set("Sless-Invocation-Id", ids[i])
		req.Header.Set("traceparent", traceparent)
		res, err := (&http.Client{Timeout: deadline}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	w.waitFor(t, "marked", func() bool {
		return len(marked(w.stdout.String(), ids[0]+";"+tp)) > 0 && len(marked(w.stdout.String(), ids[1])) > 0
	})
}

func TestAFailureIsMarkedWithTheCallsID(t *testing.T) {
	for _, entrypoint := range []string{"handler.Fails", "handler.Panics"} {
		w := start(t, entrypoint)
		id := uuid(3)
		if status, _ := w.call(t, "/", id); status != 500 {
			t.Fatalf("%s: got %d", entrypoint, status)
		}
		w.waitFor(t, "logged", func() bool { return strings.Contains(w.stderr.String(), "GET / 500") })
		lines := marked(w.stderr.String(), id)
		text := strings.Join(lines, "\n")
		if len(lines) < 2 || lines[0] != "sless: GET / raised:" ||
			!strings.Contains(text, "no such record") && !strings.Contains(text, "index out of range") {
			t.Errorf("%s: stderr marked %q", entrypoint, lines)
		}
		if got := strings.Join(unmarked(w.stderr.String()), "\n"); strings.Contains(got, "raised") || strings.Contains(got, "goroutine") {
			t.Errorf("%s: stderr unmarked %q", entrypoint, got)
		}
	}
}

func TestWhatLogFatalWritesIsMarkedBeforeTheProcessExits(t *testing.T) {
	w := start(t, "handler.Fatal")
	id := uuid(4)
	if status, _, err := w.get("/", id); err == nil {
		t.Fatalf("answered %d", status)
	}
	select {
	case <-w.exited:
	case <-time.After(deadline):
		t.Fatal("still running")
	}
	if lines := marked(w.stderr.String(), id); len(lines) != 1 || !strings.HasSuffix(lines[0], " cannot go on") {
		t.Errorf("stderr marked %q; stderr:\n%q", lines, w.stderr)
	}
}

func TestConcurrentCallsAreNeverMarkedWithAnotherCallsID(t *testing.T) {
	w := start(t, "handler.Together")
	ids := map[string]string{"1": uuid(5), "2": uuid(6)}
	var wg sync.WaitGroup
	for n, id := range ids {
		wg.Add(1)
		go func(n, id string) {
			defer wg.Done()
			if status, body, err := w.get("/?n="+n, id); err != nil || status != 200 || body != n {
				t.Errorf("call %s: got %d %q %v", n, status, body, err)
			}
		}(n, id)
	}
	wg.Wait()
	w.waitFor(t, "printed", func() bool { return strings.Count(w.stdout.String(), "\n") >= 5 })
	out := w.stdout.String()
	for n, id := range ids {
		// "a-n" was written while its call may have been alone: marked with
		// its id or not at all. "b-n" was written with both in flight.
		if got := marked(out, id); len(got) > 1 || len(got) == 1 && got[0] != "a-"+n {
			t.Errorf("call %s marked %q; stdout:\n%q", n, got, out)
		}
	}
	if got := unmarked(out); !strings.Contains(strings.Join(got, "\n"), "b-1") || !strings.Contains(strings.Join(got, "\n"), "b-2") {
		t.Errorf("unmarked %q", got)
	}
}
