// Command function is the sless HTTP wrapper for Go functions (runtime go1.23).
//
// It is not built on its own: a build copies this file, next to a generated
// file that registers the exported functions of the user's package, into a
// directory of the user's module and compiles both into one binary. At start
// it looks up the entrypoint (`package.Function`), then calls it with one
// event per HTTP request and turns its result into the HTTP response. The
// contract is described in runtimes/README.md; it is the same for every
// runtime.
//
// Configuration (environment):
//
//	SLESS_LISTEN_FD   a listening TCP socket the process inherited, to serve on
//	                  (how the local driver starts it: the socket is sless's)
//	SLESS_PORT        port to listen on (required without SLESS_LISTEN_FD)
//	SLESS_HOST        address to listen on (default 127.0.0.1)
//	SLESS_CODE_DIR    directory with the user's files (required); the working directory
//	SLESS_ENTRYPOINT  package.Function, e.g. handler.Handle
//
// Exit codes: 0 after SIGTERM/SIGINT, 2 bad configuration, 3 the entrypoint
// does not exist or has a signature that cannot be called, 4 the port could
// not be bound.
//
// Job mode (`function --job`, or SLESS_JOB=1): no port; the event is read as
// JSON from the file SLESS_JOB_EVENT_FILE names when it is set, else from
// stdin, the function is called once, its result is written to stdout as one
// line of JSON, and the binary exits 0 (1 when the function returned an error
// or panicked).
//
// Output: once it serves, os.Stdout and os.Stderr are pipes the wrapper reads
// a line at a time; a line read while exactly one call is in flight, and that
// call's request carried a `Sless-Invocation-Id`, is written as
// `\x1e<id>\x1f<line>`, or `\x1e<id>;<traceparent>\x1f<line>` when it came
// with a `traceparent` (see "Output and the call that printed it" in
// runtimes/README.md).
//
// Standard library only; builds with Go 1.21 and later, for Unix systems
// (the output relay reads its pipes with syscall).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"reflect"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Set by the generated registration file (sless_functions.go).
var (
	packageName string
	functions   = map[string]any{}
)

const (
	reservedPrefix = "/__sless/"
	healthPath     = "/__sless/health"
	shutdownGrace  = 5 * time.Second
	serverName     = "sless-go1.23"

	exitConfig     = 2
	exitEntrypoint = 3
	exitListen     = 4
)

var logMu sync.Mutex

// logLine writes one of the wrapper's own lines, never marked.
func logLine(format string, args ...any) {
	if stderrRelay != nil {
		stderrRelay.writeOwn("", fmt.Sprintf(format, args...))
		return
	}
	logMu.Lock()
	defer logMu.Unlock()
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

func fail(code int, format string, args ...any) {
	logLine("sless: "+format, args...)
	os.Exit(code)
}

// invalidResponse: the function returned a value that cannot be turned into
// a response.
type invalidResponse struct{ msg string }

func (e *invalidResponse) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &invalidResponse{msg: fmt.Sprintf(format, args...)}
}

// ---------------------------------------------------------------------------
// Configuration and the entrypoint
// ---------------------------------------------------------------------------

type config struct {
	host, codeDir, entrypoint string
	port                      int
	// listenFd is the inherited listening socket, or -1.
	listenFd int
}

func readConfig(job bool) config {
	portText := strings.TrimSpace(os.Getenv("SLESS_PORT"))
	host := strings.TrimSpace(os.Getenv("SLESS_HOST"))
	if host == "" {
		host = "127.0.0.1"
	}
	codeDir := strings.TrimSpace(os.Getenv("SLESS_CODE_DIR"))
	entrypoint := strings.TrimSpace(os.Getenv("SLESS_ENTRYPOINT"))
	port := 0
	listenFd := -1
	if fdText := strings.TrimSpace(os.Getenv("SLESS_LISTEN_FD")); fdText != "" && !job {
		fd, err := strconv.Atoi(fdText)
		if err != nil || fd < 0 {
			fail(exitConfig, "SLESS_LISTEN_FD %q is not a file descriptor", fdText)
		}
		listenFd = fd
	}
	if !job && listenFd < 0 {
		if portText == "" {
			fail(exitConfig, "SLESS_PORT is not set")
		}
		var err error
		port, err = strconv.Atoi(portText)
		if err != nil || port < 0 || port > 65535 {
			fail(exitConfig, "SLESS_PORT %q is not a port number", portText)
		}
	}
	if codeDir == "" {
		fail(exitConfig, "SLESS_CODE_DIR is not set")
	}
	if info, err := os.Stat(codeDir); err != nil || !info.IsDir() {
		fail(exitConfig, "SLESS_CODE_DIR %q is not a directory", codeDir)
	}
	if entrypoint == "" {
		fail(exitConfig, "SLESS_ENTRYPOINT is not set")
	}
	return config{host: host, codeDir: codeDir, entrypoint: entrypoint, port: port, listenFd: listenFd}
}

var (
	contextType = reflect.TypeOf((*context.Context)(nil)).Elem()
	errorType   = reflect.TypeOf((*error)(nil)).Elem()
)

// handler is the user's function and how to call it.
type handler struct {
	fn        reflect.Value
	withCtx   bool
	eventType reflect.Type
	// Index of the result value, or -1 when the function returns only an error.
	valueOut int
	// Index of the error result, or -1.
	errOut int
}

const signatures = "func([context.Context,] E) (R, error), func([context.Context,] E) R or func([context.Context,] E) error, where E is a type the event decodes into as JSON (a struct or map[string]any)"

// loadEntrypoint finds `package.Function` among the registered functions and
// checks that it can be called; it exits with code 3 when it cannot.
func loadEntrypoint(entrypoint string) *handler {
	dot := strings.LastIndexByte(entrypoint, '.')
	if dot <= 0 || dot == len(entrypoint)-1 {
		fail(exitEntrypoint, "entrypoint %q is not of the form package.Function", entrypoint)
	}
	pkg, name := entrypoint[:dot], entrypoint[dot+1:]
	if pkg != packageName {
		fail(exitEntrypoint, "cannot load entrypoint %q: the function's package is %q, not %q", entrypoint, packageName, pkg)
	}
	fn, ok := functions[name]
	if !ok {
		names := make([]string, 0, len(functions))
		for n := range functions {
			names = append(names, n)
		}
		sort.Strings(names)
		fail(exitEntrypoint, "cannot load entrypoint %q: package %s has no exported function %s (it has: %s)",
			entrypoint, packageName, name, strings.Join(names, ", "))
	}
	v := reflect.ValueOf(fn)
	t := v.Type()
	h := &handler{fn: v, valueOut: -1, errOut: -1}
	ok = t.Kind() == reflect.Func && !t.IsVariadic()
	if ok {
		switch t.NumIn() {
		case 1:
			h.eventType = t.In(0)
		case 2:
			h.withCtx = true
			h.eventType = t.In(1)
			ok = t.In(0) == contextType
		default:
			ok = false
		}
	}
	if ok {
		switch {
		case t.NumOut() == 1 && t.Out(0) == errorType:
			h.errOut = 0
		case t.NumOut() == 1:
			h.valueOut = 0
		case t.NumOut() == 2 && t.Out(1) == errorType:
			h.valueOut, h.errOut = 0, 1
		default:
			ok = false
		}
	}
	if !ok {
		fail(exitEntrypoint, "entrypoint %q has type %s; it must be %s", entrypoint, t, signatures)
	}
	// The event must decode into the parameter's type.
	sample, _ := json.Marshal(event{Query: map[string]string{}, Headers: map[string]string{}})
	if err := json.Unmarshal(sample, reflect.New(h.eventType).Interface()); err != nil {
		fail(exitEntrypoint, "entrypoint %q takes a %s, which the event does not decode into: %v", entrypoint, h.eventType, err)
	}
	return h
}

// ---------------------------------------------------------------------------
// Request -> event
// ---------------------------------------------------------------------------

// event is what the function gets, as JSON decoded into its parameter type.
type event struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   map[string]string `json:"query"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	JSON    json.RawMessage   `json:"json"`
}

// splitTarget splits a request target into the path (as received) and the
// raw query string.
func splitTarget(target string) (string, string) {
	if i := strings.IndexByte(target, '#'); i >= 0 {
		target = target[:i]
	}
	path, query := target, ""
	if i := strings.IndexByte(target, '?'); i >= 0 {
		path, query = target[:i], target[i+1:]
	}
	// Absolute form (`http://host/path`): keep only the path.
	if i := strings.Index(path, "://"); i > 0 && !strings.HasPrefix(path, "/") {
		rest := path[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			path = rest[j:]
		} else {
			path = ""
		}
	}
	if path == "" {
		path = "/"
	}
	return path, query
}

// parseQuery decodes a query string; for a repeated key the last value wins
// and a key without a value maps to "".
func parseQuery(raw string) map[string]string {
	out := map[string]string{}
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		key, value, _ := strings.Cut(pair, "=")
		out[unescape(key)] = unescape(value)
	}
	return out
}

func unescape(s string) string {
	if text, err := url.QueryUnescape(s); err == nil {
		return text
	}
	// A malformed escape is kept as it is.
	return strings.ReplaceAll(s, "+", " ")
}

func buildEvent(r *http.Request, path, query string, body []byte) event {
	headers := make(map[string]string, len(r.Header)+2)
	for name, values := range r.Header {
		headers[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	// net/http takes these two out of the header map.
	if r.Host != "" {
		headers["host"] = r.Host
	}
	if len(r.TransferEncoding) > 0 {
		headers["transfer-encoding"] = strings.Join(r.TransferEncoding, ", ")
	}
	text := strings.ToValidUTF8(string(body), "\uFFFD")
	var parsed json.RawMessage
	if strings.TrimSpace(text) != "" && json.Valid([]byte(text)) {
		parsed = json.RawMessage(text)
	}
	return event{
		Method:  r.Method,
		Path:    path,
		Query:   parseQuery(query),
		Headers: headers,
		Body:    text,
		JSON:    parsed,
	}
}

// ---------------------------------------------------------------------------
// Result -> response
// ---------------------------------------------------------------------------

type header struct{ name, value string }

type response struct {
	status  int
	headers []header
	body    []byte
}

var framingHeaders = map[string]bool{"content-length": true, "transfer-encoding": true, "connection": true}

// jsonBytes encodes a value as JSON without escaping <, > and &.
func jsonBytes(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

func hasHeader(headers []header, name string) bool {
	for _, h := range headers {
		if strings.EqualFold(h.name, name) {
			return true
		}
	}
	return false
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

func headerText(name string, v any) (string, error) {
	var text string
	switch x := v.(type) {
	case string:
		text = x
	case bool:
		text = strconv.FormatBool(x)
	case float64:
		text = strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		text = x.String()
	default:
		text = fmt.Sprint(x)
	}
	if strings.ContainsAny(text, "\r\n\x00") {
		return "", invalid("invalid value for header %q", name)
	}
	return text, nil
}

// normaliseHeaders turns the function's `headers` value into a list.
func normaliseHeaders(raw any) ([]header, error) {
	if isNil(raw) {
		return nil, nil
	}
	m, ok := toStringMap(raw)
	if !ok {
		return nil, invalid("'headers' must be a map, not %T", raw)
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []header
	for _, name := range names {
		if !validHeaderName(name) {
			return nil, invalid("invalid header name %q", name)
		}
		if framingHeaders[strings.ToLower(name)] {
			continue
		}
		values := []any{m[name]}
		if list := reflect.ValueOf(m[name]); m[name] != nil && (list.Kind() == reflect.Slice || list.Kind() == reflect.Array) {
			values = values[:0]
			for i := 0; i < list.Len(); i++ {
				values = append(values, list.Index(i).Interface())
			}
		}
		for _, v := range values {
			if isNil(v) {
				continue
			}
			text, err := headerText(name, v)
			if err != nil {
				return nil, err
			}
			out = append(out, header{name, text})
		}
	}
	return out, nil
}

// toStringMap reads a map with string keys (map[string]string,
// map[string]any, map[string][]string, ...).
func toStringMap(v any) (map[string]any, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Map || rv.Type().Key().Kind() != reflect.String {
		return nil, false
	}
	out := make(map[string]any, rv.Len())
	iter := rv.MapRange()
	for iter.Next() {
		out[iter.Key().String()] = iter.Value().Interface()
	}
	return out, true
}

func statusCode(raw any) (int, error) {
	var n float64
	switch x := raw.(type) {
	case bool:
		return 0, invalid("'statusCode' must be an integer, not bool")
	case string:
		s := strings.TrimSpace(x)
		i, err := strconv.Atoi(s)
		if err != nil || s == "" || s[0] < '0' || s[0] > '9' {
			return 0, invalid("'statusCode' must be an integer, not string")
		}
		n = float64(i)
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return 0, invalid("'statusCode' must be an integer")
		}
		n = f
	default:
		rv := reflect.ValueOf(raw)
		switch {
		case raw != nil && rv.CanInt():
			n = float64(rv.Int())
		case raw != nil && rv.CanUint():
			n = float64(rv.Uint())
		case raw != nil && rv.CanFloat():
			n = rv.Float()
		default:
			return 0, invalid("'statusCode' must be an integer, not %T", raw)
		}
	}
	if n != math.Trunc(n) {
		return 0, invalid("'statusCode' must be an integer, not %v", n)
	}
	if n < 200 || n > 599 {
		return 0, invalid("'statusCode' %v is outside 200..599", n)
	}
	return int(n), nil
}

// statusForm maps `{statusCode, headers, body}`. A []byte body is sent as it
// is; other bodies as in a plain result.
func statusForm(m map[string]any) (response, error) {
	status, err := statusCode(m["statusCode"])
	if err != nil {
		return response{}, err
	}
	headers, err := normaliseHeaders(m["headers"])
	if err != nil {
		return response{}, err
	}
	var data []byte
	contentType := ""
	switch body := m["body"].(type) {
	case nil:
	case string:
		data, contentType = []byte(body), "text/plain; charset=utf-8"
	case []byte:
		data, contentType = body, "application/octet-stream"
	default:
		if isNil(body) {
			break
		}
		if data, err = jsonBytes(body); err != nil {
			return response{}, err
		}
		contentType = "application/json"
	}
	if contentType != "" && !hasHeader(headers, "content-type") {
		headers = append(headers, header{"Content-Type", contentType})
	}
	return response{status, headers, data}, nil
}

// buildResponse maps the function's result to a response.
func buildResponse(result any) (response, error) {
	switch v := result.(type) {
	case string:
		return response{200, []header{{"Content-Type", "text/plain; charset=utf-8"}}, []byte(v)}, nil
	case []byte:
		return response{200, []header{{"Content-Type", "application/octet-stream"}}, v}, nil
	case map[string]any:
		if _, ok := v["statusCode"]; ok {
			return statusForm(v)
		}
	}
	if isNil(result) {
		return response{status: 204}, nil
	}
	data, err := jsonBytes(result)
	if err != nil {
		return response{}, err
	}
	// A struct (or another map type) that encodes to an object with a
	// `statusCode` key is the statusCode form too.
	if len(data) > 0 && data[0] == '{' && bytes.Contains(data, []byte(`"statusCode"`)) {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if dec.Decode(&m) == nil {
			if _, ok := m["statusCode"]; ok {
				return statusForm(m)
			}
		}
	}
	return response{200, []header{{"Content-Type", "application/json"}}, data}, nil
}

// errorName names an error or panic value by its type, as the error
// response's `error` field.
func errorName(v any) string {
	if v == nil {
		return "nil"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", v), "*")
}

func errorResponse(name, message, traceback string) response {
	data, _ := jsonBytes(map[string]string{"error": name, "message": message, "traceback": traceback})
	return response{500, []header{{"Content-Type", "application/json"}}, data}
}

// ---------------------------------------------------------------------------
// Output and the call that printed it
// ---------------------------------------------------------------------------

const (
	invocationHeader = "Sless-Invocation-Id"
	// A line still without its newline is written as a line of its own
	// once it is longer than this many bytes.
	partialLineLimit = 16 * 1024
)

var (
	uuidPattern        = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	traceparentPattern = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)
)

// invocationID is the id a request's Sless-Invocation-Id names, lowercase,
// or "" unless there is exactly one such header and it is a UUID; followed
// by ";" and the request's traceparent when it has one, well formed.
func invocationID(r *http.Request) string {
	values := r.Header.Values(invocationHeader)
	if len(values) != 1 {
		return ""
	}
	id := strings.ToLower(strings.TrimSpace(values[0]))
	if !uuidPattern.MatchString(id) {
		return ""
	}
	if tp := r.Header.Values("traceparent"); len(tp) == 1 && traceparentPattern.MatchString(strings.TrimSpace(tp[0])) {
		id += ";" + strings.TrimSpace(tp[0])
	}
	return id
}

// appendLine appends line as written for the call id: "\x1e" + id +
// "\x1f" + line + "\n", or line + "\n" when id is "".
func appendLine(dst []byte, id string, line []byte) []byte {
	if id != "" {
		dst = append(append(append(dst, 0x1e), id...), 0x1f)
	}
	return append(append(dst, line...), '\n')
}

// call is a call in flight; id is "" when its request named none.
type call struct{ id string }

// inFlight holds the calls being served. Goroutines have no identity, so
// a line is a call's only while that call is alone in flight.
var inFlight = struct {
	sync.Mutex
	calls map[*call]bool
}{calls: map[*call]bool{}}

// callsNow is how many calls are in flight, and the id of the one when it
// is alone ("" when its request named none).
func callsNow() (int, string) {
	inFlight.Lock()
	defer inFlight.Unlock()
	n := len(inFlight.calls)
	if n == 1 {
		for c := range inFlight.calls {
			return 1, c.id
		}
	}
	return n, ""
}

// soleCallID is the id lines read now are marked with.
func soleCallID() string {
	_, id := callsNow()
	return id
}

// relay stands behind os.Stdout or os.Stderr while the wrapper serves: the
// function writes into a pipe, and the relay copies it to the real stream a
// line at a time (one write for the lines of one read, never a part of a
// line), each marked as soleCallID says when it is read. Lock order:
// relay.mu, then inFlight.
type relay struct {
	mu   sync.Mutex // held while the pipe is read and lines are written
	out  *os.File   // the real stream
	pipe syscall.RawConn
	held []byte // the start of the current line
	buf  []byte
}

// The relays, once installed (when serving: a job's output is unmarked).
var stdoutRelay, stderrRelay *relay

// installRelays puts pipes in place of os.Stdout and os.Stderr, and the
// relay in place of the log package's output unless the function set one.
// A writer the function's package took from them before (in its init, say)
// keeps writing to the real stream, unmarked.
func installRelays() error {
	var err error
	var stdout, stderr *os.File
	if stdoutRelay, stdout, err = newRelay(os.Stdout); err != nil {
		return err
	}
	if stderrRelay, stderr, err = newRelay(os.Stderr); err != nil {
		return err
	}
	// The log package writes through the relay itself, not the pipe: what
	// log.Fatal writes is out before it exits.
	if log.Writer() == os.Stderr {
		log.SetOutput(stderrRelay)
	}
	os.Stdout, os.Stderr = stdout, stderr
	return nil
}

func newRelay(out *os.File) (*relay, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	pipe, err := r.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	rl := &relay{out: out, pipe: pipe, buf: make([]byte, 64*1024)}
	go rl.run()
	return rl, w, nil
}

func relays() []*relay {
	if stdoutRelay == nil {
		return nil
	}
	return []*relay{stdoutRelay, stderrRelay}
}

// run copies the pipe as it fills, until every writer closed it.
func (rl *relay) run() {
	for {
		done := false
		err := rl.pipe.Read(func(fd uintptr) bool {
			rl.mu.Lock()
			defer rl.mu.Unlock()
			n, err := syscall.Read(int(fd), rl.buf)
			switch {
			case err == syscall.EAGAIN:
				return false // wait until there is more
			case err == syscall.EINTR:
			case n <= 0:
				done = true
			default:
				rl.take(rl.buf[:n], soleCallID())
			}
			return true
		})
		if err != nil || done {
			return
		}
	}
}

// drain takes in what the pipe holds now, so that what was written before
// this moment is attributed as of this moment. The caller holds mu.
func (rl *relay) drain() {
	rl.pipe.Control(func(fd uintptr) {
		for {
			n, err := syscall.Read(int(fd), rl.buf)
			if err == syscall.EINTR {
				continue
			}
			if n <= 0 {
				return
			}
			rl.take(rl.buf[:n], soleCallID())
		}
	})
}

// take writes the complete lines of p, marked with id unless it is "",
// and holds the rest. The caller holds mu.
func (rl *relay) take(p []byte, id string) {
	var out []byte
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			break
		}
		rl.held = append(rl.held, p[:i]...)
		out = appendLine(out, id, rl.held)
		rl.held, p = rl.held[:0], p[i+1:]
	}
	if rl.held = append(rl.held, p...); len(rl.held) > partialLineLimit {
		out = appendLine(out, id, rl.held)
		rl.held = rl.held[:0]
	}
	if len(out) > 0 {
		rl.out.Write(out)
	}
}

// endLine writes the held line, if any, with a newline added. The caller
// holds mu.
func (rl *relay) endLine(id string) {
	if len(rl.held) > 0 {
		rl.out.Write(appendLine(nil, id, rl.held))
		rl.held = rl.held[:0]
	}
}

// Write is the log package's output: after what the pipe holds, lines
// attributed as those read from it.
func (rl *relay) Write(p []byte) (int, error) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.drain()
	rl.take(p, soleCallID())
	return len(p), nil
}

// writeOwn writes the wrapper's own lines, marked with id unless it is "",
// after what the function wrote before.
func (rl *relay) writeOwn(id, text string) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.drain()
	var out []byte
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		out = appendLine(out, id, []byte(line))
	}
	rl.out.Write(out)
}

// beginCall counts c in flight, after taking in what was written before
// it began: a line left open then is ended, unmarked, if no call was in
// flight.
func beginCall(c *call) {
	for _, rl := range relays() {
		rl.mu.Lock()
		rl.drain()
		if n, _ := callsNow(); n == 0 {
			rl.endLine("")
		}
		rl.mu.Unlock()
	}
	inFlight.Lock()
	inFlight.calls[c] = true
	inFlight.Unlock()
}

// endCall counts c out, after taking in what its code wrote: a line it
// left open is ended, marked, if it was alone in flight.
func endCall(c *call) {
	for _, rl := range relays() {
		rl.mu.Lock()
		rl.drain()
		if n, _ := callsNow(); n == 1 {
			rl.endLine(c.id)
		}
		rl.mu.Unlock()
	}
	inFlight.Lock()
	delete(inFlight.calls, c)
	inFlight.Unlock()
}

// flushRelays writes what is left in the pipes, as the process stops.
func flushRelays() {
	for _, rl := range relays() {
		rl.mu.Lock()
		rl.drain()
		rl.endLine(soleCallID())
		rl.mu.Unlock()
	}
}

// ---------------------------------------------------------------------------
// HTTP server
// ---------------------------------------------------------------------------

type server struct {
	h *handler
}

// call runs the user's function, turning a panic into an error response.
// What fails is logged on behalf of the call: marked with its id.
func (s *server) call(ctx context.Context, id, method, path string, ev event) (resp response) {
	c := &call{id: id}
	beginCall(c)
	defer endCall(c)
	failure := func(name, message, traceback string) response {
		text := fmt.Sprintf("sless: %s %s raised:\n%s", method, path, traceback)
		if stderrRelay != nil {
			stderrRelay.writeOwn(id, text)
		} else {
			logLine("%s", strings.TrimRight(text, "\n"))
		}
		return errorResponse(name, message, traceback)
	}
	defer func() {
		if p := recover(); p != nil {
			name := "panic"
			if err, ok := p.(error); ok {
				name = errorName(err)
			}
			traceback := fmt.Sprintf("panic: %v\n\n%s", p, userStack(string(debug.Stack())))
			resp = failure(name, fmt.Sprint(p), traceback)
		}
	}()
	raw, err := json.Marshal(ev)
	if err != nil {
		return failure(errorName(err), err.Error(), err.Error()+"\n")
	}
	result, failed := s.h.invoke(ctx, raw)
	if failed != nil {
		return failure(failed.name, failed.message, failed.traceback)
	}
	resp, err = buildResponse(result)
	if err != nil {
		// The result could not be mapped: only the error line helps.
		name := errorName(err)
		if _, ok := err.(*invalidResponse); ok {
			name = "InvalidResponse"
		}
		return failure(name, err.Error(), fmt.Sprintf("%s: %s\n", name, err.Error()))
	}
	return resp
}

// callFailure is how one call of the function failed.
type callFailure struct{ name, message, traceback string }

// invoke calls the function with the event as JSON; a returned error or a
// panic is a failure.
func (h *handler) invoke(ctx context.Context, raw []byte) (result any, failed *callFailure) {
	defer func() {
		if p := recover(); p != nil {
			name := "panic"
			if err, ok := p.(error); ok {
				name = errorName(err)
			}
			failed = &callFailure{name, fmt.Sprint(p), fmt.Sprintf("panic: %v\n\n%s", p, userStack(string(debug.Stack())))}
		}
	}()
	arg := reflect.New(h.eventType)
	if err := json.Unmarshal(raw, arg.Interface()); err != nil {
		return nil, &callFailure{errorName(err), err.Error(), err.Error() + "\n"}
	}
	args := []reflect.Value{arg.Elem()}
	if h.withCtx {
		args = []reflect.Value{reflect.ValueOf(ctx), arg.Elem()}
	}
	out := h.fn.Call(args)
	if h.errOut >= 0 && !out[h.errOut].IsNil() {
		err := out[h.errOut].Interface().(error)
		name := errorName(err)
		return nil, &callFailure{name, err.Error(), fmt.Sprintf("%s: %s\n", name, err.Error())}
	}
	if h.valueOut >= 0 {
		result = out[h.valueOut].Interface()
	}
	return result, nil
}

// userStack keeps the frames of a panic's stack between the panic and the
// wrapper's call of the function: the wrapper's own frames do not help.
func userStack(stack string) string {
	start := strings.Index(stack, "\npanic(")
	end := strings.Index(stack, "\nreflect.Value.call(")
	if start < 0 || end < start {
		return stack
	}
	head := stack[:strings.IndexByte(stack, '\n')+1] // goroutine N [running]:
	frames := stack[start+1 : end+1]
	// Drop the panic( frame itself: its function line and its file line.
	for i := 0; i < 2; i++ {
		if nl := strings.IndexByte(frames, '\n'); nl >= 0 {
			frames = frames[nl+1:]
		}
	}
	return head + frames
}

func send(w http.ResponseWriter, method string, resp response) error {
	h := w.Header()
	h.Set("Server", serverName)
	for _, hd := range resp.headers {
		h.Add(hd.name, hd.value)
	}
	noBody := resp.status == 204 || resp.status == 304
	if !noBody {
		h.Set("Content-Length", strconv.Itoa(len(resp.body)))
	}
	w.WriteHeader(resp.status)
	if noBody || method == http.MethodHead || len(resp.body) == 0 {
		return nil
	}
	_, err := w.Write(resp.body)
	return err
}

func sendJSON(w http.ResponseWriter, method string, status int, value any, extra ...header) error {
	data, _ := jsonBytes(value)
	return send(w, method, response{status, append(extra, header{"Content-Type", "application/json"}), data})
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	started := time.Now()
	path, query := splitTarget(r.RequestURI)
	status, err := s.respond(w, r, path, query)
	shown := strconv.Itoa(status)
	if err != nil {
		shown = "-"
	}
	ms := float64(time.Since(started).Microseconds()) / 1000
	logLine("%s %s %s %.2fms", r.Method, path, shown, ms)
}

func (s *server) respond(w http.ResponseWriter, r *http.Request, path, query string) (int, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.Header().Set("Connection", "close")
		return 400, sendJSON(w, r.Method, 400, map[string]string{"error": "BadRequest", "message": err.Error()})
	}
	if strings.HasPrefix(path, reservedPrefix) {
		switch {
		case path != healthPath:
			return 404, sendJSON(w, r.Method, 404, map[string]string{"error": "NotFound", "message": "no such path " + path})
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			return 405, sendJSON(w, r.Method, 405, map[string]string{"error": "MethodNotAllowed", "message": "use GET"}, header{"Allow", "GET, HEAD"})
		default:
			return 200, sendJSON(w, r.Method, 200, healthDocument())
		}
	}
	resp := s.call(r.Context(), invocationID(r), r.Method, path, buildEvent(r, path, query, body))
	return resp.status, send(w, r.Method, resp)
}

// ---------------------------------------------------------------------------
// Job mode: one call, the event from a file or stdin, the result on stdout
// ---------------------------------------------------------------------------

// jobResultJSON is the function's result as one line of JSON: nil is null,
// a []byte (also as a map's `body`) a string.
func jobResultJSON(result any) ([]byte, error) {
	switch v := result.(type) {
	case []byte:
		result = strings.ToValidUTF8(string(v), "\uFFFD")
	case map[string]any:
		if b, ok := v["body"].([]byte); ok {
			copied := make(map[string]any, len(v))
			for k, x := range v {
				copied[k] = x
			}
			copied["body"] = strings.ToValidUTF8(string(b), "\uFFFD")
			result = copied
		}
	}
	if isNil(result) {
		return []byte("null"), nil
	}
	return jsonBytes(result)
}

// lineTracker copies what the function prints to stdout and remembers
// whether it ended a line, so that the result starts on a line of its own.
type lineTracker struct {
	out         *os.File
	atLineStart bool
}

func (t *lineTracker) copyFrom(r io.Reader, done chan<- struct{}) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			t.out.Write(buf[:n])
			t.atLineStart = buf[n-1] == '\n'
		}
		if err != nil {
			close(done)
			return
		}
	}
}

// healthDocument is what the health check answers: with the instance the
// driver started this process as, so a driver can tell its process from
// another one that took the port.
func healthDocument() map[string]string {
	doc := map[string]string{"status": "ok"}
	if instance := os.Getenv("SLESS_INSTANCE"); instance != "" {
		doc["instance"] = instance
	}
	return doc
}

// runJob calls the function once with the job's event (the file
// SLESS_JOB_EVENT_FILE names when it is set, how the drivers hand it over,
// else stdin) and exits.
func runJob(h *handler) {
	if file, ok := os.LookupEnv("SLESS_JOB_EVENT_FILE"); ok {
		raw, err := os.ReadFile(file)
		if err != nil {
			fail(exitConfig, "SLESS_JOB_EVENT_FILE %q cannot be read: %v", file, err)
		}
		if !json.Valid(raw) {
			fail(exitConfig, "the event in SLESS_JOB_EVENT_FILE %q is not JSON", file)
		}
		runJobWith(h, raw)
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil || !json.Valid(raw) {
		fail(exitConfig, "the event on stdin is not JSON")
	}
	runJobWith(h, raw)
}

func runJobWith(h *handler, raw []byte) {
	stdout := os.Stdout
	tracker := &lineTracker{out: stdout, atLineStart: true}
	r, w, err := os.Pipe()
	if err != nil {
		fail(exitConfig, "cannot capture stdout: %v", err)
	}
	copied := make(chan struct{})
	go tracker.copyFrom(r, copied)
	os.Stdout = w
	result, failed := h.invoke(context.Background(), raw)
	os.Stdout = stdout
	w.Close()
	<-copied
	if failed != nil {
		logLine("%s", strings.TrimRight(failed.traceback, "\n"))
		os.Exit(1)
	}
	line, err := jobResultJSON(result)
	if err != nil {
		logLine("%s: %s", errorName(err), err.Error())
		os.Exit(1)
	}
	if !tracker.atLineStart {
		stdout.Write([]byte("\n"))
	}
	stdout.Write(append(line, '\n'))
	os.Exit(0)
}

func main() {
	job := (len(os.Args) > 1 && os.Args[1] == "--job") || os.Getenv("SLESS_JOB") == "1"
	cfg := readConfig(job)
	if err := os.Chdir(cfg.codeDir); err != nil {
		fail(exitConfig, "SLESS_CODE_DIR %q: %v", cfg.codeDir, err)
	}
	h := loadEntrypoint(cfg.entrypoint)
	if job {
		runJob(h)
	}

	// Before the function runs a call; its package's init ran already, and
	// what it printed then went to the real streams, unmarked.
	if err := installRelays(); err != nil {
		fail(exitConfig, "cannot read the function's output: %v", err)
	}

	addr := net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port))
	var listener net.Listener
	var err error
	if cfg.listenFd >= 0 {
		// A socket bound and listening already, handed over by whoever
		// started this process: serve on it as it is.
		addr = "SLESS_LISTEN_FD " + strconv.Itoa(cfg.listenFd)
		file := os.NewFile(uintptr(cfg.listenFd), "sless-listener")
		listener, err = net.FileListener(file)
		if err != nil {
			fail(exitListen, "cannot serve on %s: %v", addr, err)
		}
		file.Close()
	} else {
		listener, err = net.Listen("tcp", addr)
		if err != nil {
			fail(exitListen, "cannot listen on %s: %v", addr, err)
		}
	}
	// Go's TCP connections have Nagle's algorithm off (TCP_NODELAY) already.
	srv := &http.Server{
		Handler:           &server{h: h},
		ReadHeaderTimeout: 60 * time.Second,
		// Idle keep-alive connections (and stalled uploads) are closed after
		// this long; the time the function runs does not count.
		IdleTimeout:    300 * time.Second,
		ReadTimeout:    300 * time.Second,
		MaxHeaderBytes: 64 * 1024,
	}
	logLine("sless: serving %s on %s", cfg.entrypoint, listener.Addr())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			logLine("sless: requests still running after %s, exiting anyway", shutdownGrace)
		}
		close(done)
	}()
	if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fail(exitListen, "serving on %s: %v", addr, err)
	}
	<-done
	flushRelays()
	logLine("sless: stopped")
}
