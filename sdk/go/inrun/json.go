package inrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Object is a JSON object as the SDK parses it: values are nil, bool, string,
// json.Number, Array or Object. Being an alias, it is the map[string]any that
// encoding/json produces too.
type Object = map[string]any

// Array is a JSON array as the SDK parses it.
type Array = []any

// ParseJSON parses one JSON value. Numbers become json.Number, so an integer such as
// 12345678901234567890 (beyond float64's precision) is written back exactly as read.
func ParseJSON(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("text after the JSON value")
	}
	return v, nil
}

// MarshalJSON writes v as compact JSON text, without encoding/json's HTML escaping of
// <, > and &. Map keys are sorted (as encoding/json does); struct fields keep their order.
func MarshalJSON(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// Pointer looks up a JSON Pointer (RFC 6901) in v, e.g. "/spec/template/spec/containers/0"
// ("~1" stands for a "/" in a key, "~0" for "~"); "" is v itself. The second result is
// false when a step is missing.
func Pointer(v any, pointer string) (any, bool) {
	if pointer == "" {
		return v, true
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, false
	}
	for _, token := range strings.Split(pointer[1:], "/") {
		token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[token]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(token)
			if err != nil || i < 0 || i >= len(node) || token != strconv.Itoa(i) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// AsObject returns v as an Object when it is one.
func AsObject(v any) (Object, bool) {
	o, ok := v.(map[string]any)
	return o, ok && o != nil
}

// AsArray returns v as an Array when it is one.
func AsArray(v any) (Array, bool) {
	a, ok := v.([]any)
	return a, ok
}

// AsString returns v as a string when it is one.
func AsString(v any) (string, bool) {
	s, ok := v.(string)
	return s, ok
}

// AsBool returns v as a bool when it is one.
func AsBool(v any) (bool, bool) {
	b, ok := v.(bool)
	return b, ok
}

// AsInt returns v as an int64 when it is an integer in range: a json.Number without a
// fraction or exponent, or a Go integer.
func AsInt(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		return i, err == nil
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint:
		return int64(n), n <= 1<<63-1
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(n), n <= 1<<63-1
	}
	return 0, false
}

// AsFloat returns v as a float64 when it is a number.
func AsFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case float64:
		return n, true
	case float32:
		return float64(n), true
	}
	if i, ok := AsInt(v); ok {
		return float64(i), true
	}
	return 0, false
}

// Field returns obj[key] as an Object, first setting it to an empty one when it is
// missing or not an object. A hook uses it to edit nested maps:
//
//	inrun.Field(inrun.Field(resource, "metadata"), "labels")["team"] = team
func Field(obj Object, key string) Object {
	if child, ok := AsObject(obj[key]); ok {
		return child
	}
	child := Object{}
	obj[key] = child
	return child
}

// Clone returns a deep copy of a JSON value (objects and arrays copied, scalars shared).
func Clone(v any) any {
	switch node := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(node))
		for k, child := range node {
			out[k] = Clone(child)
		}
		return out
	case []any:
		out := make([]any, len(node))
		for i, child := range node {
			out[i] = Clone(child)
		}
		return out
	}
	return v
}

// jsonError is the SDK's error for a JSON text field the host sent that does not parse.
func jsonError(field string, err error) error {
	return fmt.Errorf("%s is not valid JSON: %v", field, err)
}
