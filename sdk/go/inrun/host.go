package inrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Level is the severity of a log line.
type Level uint8

// The log levels of the host's log import.
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

var levelNames = [...]string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR"}

// String is the level's name in capitals.
func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// HTTPRequest is an outbound HTTP request (the http import).
type HTTPRequest struct {
	// Method is e.g. "GET" or "POST".
	Method string
	// URL is an absolute http:// or https:// URL, without user name or password.
	URL string
	// Headers are name/value pairs; host, content-length, transfer-encoding and
	// connection are the host's and refused.
	Headers [][2]string
	// Body is sent when not nil.
	Body []byte
}

// HTTPResponse is what the server answered.
type HTTPResponse struct {
	// Status is the status code, e.g. 200.
	Status int
	// Headers are the header names (lowercase) and values, in the order received.
	Headers [][2]string
	// Body is the whole body.
	Body []byte
}

// Header is the first value of the header name (case-insensitive), or "".
func (r *HTTPResponse) Header(name string) string {
	for _, h := range r.Headers {
		if strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}

// JSON parses the body as JSON into the value into points to (encoding/json's rules).
func (r *HTTPResponse) JSON(into any) error {
	if err := json.Unmarshal(r.Body, into); err != nil {
		return fmt.Errorf("the response body is not the JSON expected: %w", err)
	}
	return nil
}

// Host holds the functions the SDK calls for the component's imports. In a component
// the SDK's glue sets those its world imports; natively (unit tests) Log writes to
// standard error and the others are nil, which makes GetObject, ListObjects, Fetch and
// infra.Credential fail with ErrNoHost. A test can set stand-ins with SetHost.
type Host struct {
	// Log writes a line to the host's log (host.log).
	Log func(level Level, message string)
	// Get reads one object as JSON text; found is false when it does not exist
	// (cluster.get). namespace "" is the CR's own.
	Get func(apiVersion, kind, namespace, name string) (object string, found bool, err error)
	// List reads every object of a kind, each as JSON text (cluster.list). namespace ""
	// is the CR's own, "*" every namespace; selector "" selects all.
	List func(apiVersion, kind, namespace, selector string) ([]string, error)
	// Fetch sends an HTTP request (http.fetch).
	Fetch func(req HTTPRequest) (HTTPResponse, error)
	// Credential reads a granted Secret key (credentials.get, the package world only).
	Credential func(name, key string) (string, error)
}

// ErrNoHost is returned by an import the component does not have, or natively when no
// stand-in was set with SetHost.
var ErrNoHost = errors.New("not available here: no host import (natively, set one with inrun.SetHost)")

var (
	hostMu sync.Mutex
	host   = Host{Log: logToStderr}
)

func logToStderr(level Level, message string) {
	fmt.Fprintf(os.Stderr, "%s %s\n", level, message)
}

// SetHost replaces the host functions and returns the previous ones (restore them when a
// test is done). A nil Log writes to standard error.
func SetHost(h Host) Host {
	hostMu.Lock()
	defer hostMu.Unlock()
	previous := host
	if h.Log == nil {
		h.Log = logToStderr
	}
	host = h
	return previous
}

// CurrentHost returns the host functions in use.
func CurrentHost() Host {
	hostMu.Lock()
	defer hostMu.Unlock()
	return host
}

// Logger writes to the host's log, tagged with the plugin's name and digest.
type Logger struct{}

// Log is the SDK's logger: inrun.Log.Infof("reconciling %s", req.Key).
var Log Logger

func (Logger) write(level Level, format string, args []any) {
	message := format
	if len(args) > 0 {
		message = fmt.Sprintf(format, args...)
	}
	CurrentHost().Log(level, message)
}

// Tracef logs at trace level (fmt.Sprintf's formatting).
func (l Logger) Tracef(format string, args ...any) { l.write(LevelTrace, format, args) }

// Debugf logs at debug level.
func (l Logger) Debugf(format string, args ...any) { l.write(LevelDebug, format, args) }

// Infof logs at info level.
func (l Logger) Infof(format string, args ...any) { l.write(LevelInfo, format, args) }

// Warnf logs at warn level.
func (l Logger) Warnf(format string, args ...any) { l.write(LevelWarn, format, args) }

// Errorf logs at error level (it returns nothing: return an error to fail the call).
func (l Logger) Errorf(format string, args ...any) { l.write(LevelError, format, args) }

// GetObject reads the object name of kind in apiVersion (e.g. "v1", "ConfigMap") from the
// host's watch cache, for a plugin the Blueprint grants capabilities.cluster.read. It
// returns nil and no error when the object does not exist. namespace "" means the CR's
// own namespace for a namespaced kind (and is the only choice for a cluster-scoped one).
// Without a grant for the kind and namespace the host answers an error; it never traps.
func GetObject(apiVersion, kind, namespace, name string) (Object, error) {
	get := CurrentHost().Get
	if get == nil {
		return nil, ErrNoHost
	}
	text, found, err := get(apiVersion, kind, namespace, name)
	if err != nil || !found {
		return nil, err
	}
	return parseObject(fmt.Sprintf("%s %s", kind, name), text)
}

// ListObjects reads every object of kind in apiVersion, in no particular order.
// namespace "" means the CR's own (or, for a kind granted as cluster-scoped, the whole
// cluster); "*" lists every namespace when the grant allows it. selector holds equality
// terms only, comma separated ("app=web,tier=front"); "" selects all.
func ListObjects(apiVersion, kind, namespace, selector string) ([]Object, error) {
	list := CurrentHost().List
	if list == nil {
		return nil, ErrNoHost
	}
	texts, err := list(apiVersion, kind, namespace, selector)
	if err != nil {
		return nil, err
	}
	out := make([]Object, 0, len(texts))
	for i, text := range texts {
		o, err := parseObject(fmt.Sprintf("%s list item %d", kind, i), text)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// Fetch sends req and waits for the whole response, for a plugin the Blueprint grants
// capabilities.http: only the hosts (and ports) it lists are reached. A refused URL, a
// timeout or a response over the grant's cap is an error; redirects are not followed.
func Fetch(req HTTPRequest) (*HTTPResponse, error) {
	fetch := CurrentHost().Fetch
	if fetch == nil {
		return nil, ErrNoHost
	}
	resp, err := fetch(req)
	if err != nil {
		return nil, err
	}
	return &resp, nil
}
