package inrun

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Decode fills the value `into` points to from a parsed JSON value (an Object, Array,
// string, json.Number, bool or nil), as encoding/json would from its text, with the
// messages the Rust SDK (serde) gives, prefixed with path:
//
//	spec: invalid type: string "many", expected u32
//	spec: invalid value: integer `70000`, expected u16
//
// Struct fields take their names from `json` tags (or the field name; a tag "-" skips
// the field); unknown keys are ignored and missing ones leave the field as it was. Only
// a pointer, interface, json.RawMessage or a type with its own UnmarshalJSON accepts
// null. A type with UnmarshalJSON or UnmarshalText (Kubernetes' resource.Quantity,
// metav1.Time, ...) decodes itself.
func Decode(value any, into any, path string) error {
	rv := reflect.ValueOf(into)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("%s: Decode needs a non-nil pointer, got %T", path, into)
	}
	if err := decodeValue(value, rv.Elem()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

var (
	numberType        = reflect.TypeFor[json.Number]()
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	unmarshalerType   = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler   = reflect.TypeFor[encoding.TextUnmarshaler]()
	errNotAddressable = errors.New("internal: a value that cannot be set")
)

func decodeValue(v any, dst reflect.Value) error {
	if !dst.CanSet() {
		return errNotAddressable
	}
	t := dst.Type()
	if t == rawMessageType {
		text, err := MarshalJSON(v)
		if err != nil {
			return err
		}
		dst.SetBytes([]byte(text))
		return nil
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		ptr := reflect.PointerTo(t)
		if ptr.Implements(unmarshalerType) {
			text, err := MarshalJSON(v)
			if err != nil {
				return err
			}
			return dst.Addr().Interface().(json.Unmarshaler).UnmarshalJSON([]byte(text))
		}
		if s, ok := v.(string); ok && ptr.Implements(textUnmarshaler) {
			return dst.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s))
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		if v == nil {
			dst.SetZero()
			return nil
		}
		if !dst.IsNil() { // decode into what it points to, as encoding/json
			return decodeValue(v, dst.Elem())
		}
		p := reflect.New(t.Elem())
		if err := decodeValue(v, p.Elem()); err != nil {
			return err
		}
		dst.Set(p)
		return nil
	case reflect.Interface:
		if v == nil {
			dst.SetZero()
			return nil
		}
		rv := reflect.ValueOf(v)
		if !rv.Type().AssignableTo(t) {
			return invalidType(v, t.String())
		}
		dst.Set(rv)
		return nil
	}
	if t == numberType {
		text, _, ok := numberText(v)
		if !ok {
			return invalidType(v, "a number")
		}
		dst.SetString(text)
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			return invalidType(v, "a string")
		}
		dst.SetString(s)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			return invalidType(v, "a boolean")
		}
		dst.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		name := "i" + strconv.Itoa(t.Bits())
		text, isInt, ok := numberText(v)
		if !ok || !isInt {
			return invalidType(v, name)
		}
		i, err := strconv.ParseInt(text, 10, t.Bits())
		if err != nil {
			return invalidValue(text, name)
		}
		dst.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		name := "u" + strconv.Itoa(t.Bits())
		text, isInt, ok := numberText(v)
		if !ok || !isInt {
			return invalidType(v, name)
		}
		u, err := strconv.ParseUint(text, 10, t.Bits())
		if err != nil {
			return invalidValue(text, name)
		}
		dst.SetUint(u)
	case reflect.Float32, reflect.Float64:
		name := "f" + strconv.Itoa(t.Bits())
		f, ok := AsFloat(v)
		if !ok {
			return invalidType(v, name)
		}
		dst.SetFloat(f)
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return invalidType(v, "a map")
		}
		if dst.IsNil() {
			dst.Set(reflect.MakeMapWithSize(t, len(obj)))
		}
		for _, key := range sortedKeys(obj) {
			k := reflect.New(t.Key()).Elem()
			if err := decodeKey(key, k); err != nil {
				return err
			}
			elem := reflect.New(t.Elem()).Elem()
			if err := decodeValue(obj[key], elem); err != nil {
				return err
			}
			dst.SetMapIndex(k, elem)
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return invalidType(v, "a sequence")
		}
		out := reflect.MakeSlice(t, len(arr), len(arr))
		for i, item := range arr {
			if err := decodeValue(item, out.Index(i)); err != nil {
				return err
			}
		}
		dst.Set(out)
	case reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return invalidType(v, fmt.Sprintf("an array of length %d", t.Len()))
		}
		if len(arr) != t.Len() {
			return fmt.Errorf("invalid length %d, expected an array of length %d", len(arr), t.Len())
		}
		for i, item := range arr {
			if err := decodeValue(item, dst.Index(i)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		if arr, ok := v.([]any); ok {
			return decodeStructSeq(arr, dst)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return invalidType(v, "struct "+t.Name())
		}
		fields := structFields(t)
		for _, key := range sortedKeys(obj) {
			index, ok := fields.find(key)
			if !ok {
				continue
			}
			field, err := dst.FieldByIndexErr(index)
			if err != nil {
				// A nil embedded pointer: allocate it on the way.
				field = fieldAlloc(dst, index)
			}
			if err := decodeValue(obj[key], field); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("cannot decode into a Go %s", t)
	}
	return nil
}

// decodeStructSeq fills a struct from an array, element i into field i in declaration
// order, as serde does for a struct given a sequence (missing trailing elements leave
// their fields as they are, as missing keys do).
func decodeStructSeq(arr []any, dst reflect.Value) error {
	index := structFields(dst.Type()).ordered
	if len(arr) > len(index) {
		return fmt.Errorf("invalid length %d, expected fewer elements in array", len(arr))
	}
	for i, item := range arr {
		field, err := dst.FieldByIndexErr(index[i])
		if err != nil {
			field = fieldAlloc(dst, index[i])
		}
		if err := decodeValue(item, field); err != nil {
			return err
		}
	}
	return nil
}

// decodeKey sets a map key from an object key: string kinds, integer kinds, or a
// TextUnmarshaler (as encoding/json).
func decodeKey(key string, k reflect.Value) error {
	if u, ok := k.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(key))
	}
	switch k.Kind() {
	case reflect.String:
		k.SetString(key)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(key, 10, k.Type().Bits())
		if err != nil {
			return invalidType(key, "i"+strconv.Itoa(k.Type().Bits()))
		}
		k.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(key, 10, k.Type().Bits())
		if err != nil {
			return invalidType(key, "u"+strconv.Itoa(k.Type().Bits()))
		}
		k.SetUint(u)
	default:
		return fmt.Errorf("cannot decode a map key into a Go %s", k.Type())
	}
	return nil
}

func fieldAlloc(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// fieldSet maps JSON names to struct field indexes: exact names first, then a
// case-insensitive match (as encoding/json).
type fieldSet struct {
	exact   map[string][]int
	folded  map[string][]int
	ordered [][]int
}

func (f fieldSet) find(key string) ([]int, bool) {
	if index, ok := f.exact[key]; ok {
		return index, true
	}
	index, ok := f.folded[strings.ToLower(key)]
	return index, ok
}

func structFields(t reflect.Type) fieldSet {
	set := fieldSet{exact: map[string][]int{}, folded: map[string][]int{}}
	var walk func(t reflect.Type, prefix []int)
	walk = func(t reflect.Type, prefix []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			index := append(append([]int(nil), prefix...), i)
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft, index)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			// A shallower field wins over an embedded one of the same name.
			if _, taken := set.exact[name]; !taken {
				set.exact[name] = index
				set.ordered = append(set.ordered, index)
			}
			if _, taken := set.folded[strings.ToLower(name)]; !taken {
				set.folded[strings.ToLower(name)] = index
			}
		}
	}
	walk(t, nil)
	return set
}

func sortedKeys(obj map[string]any) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// numberText is a number's literal and whether it is an integer (as serde_json reads
// it: no fraction, no exponent).
func numberText(v any) (text string, isInt bool, ok bool) {
	switch n := v.(type) {
	case json.Number:
		s := string(n)
		return s, !strings.ContainsAny(s, ".eE"), true
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64), false, true
	case float32:
		return strconv.FormatFloat(float64(n), 'f', -1, 32), false, true
	}
	if i, ok := AsInt(v); ok {
		return strconv.FormatInt(i, 10), true, true
	}
	if u, ok := v.(uint64); ok {
		return strconv.FormatUint(u, 10), true, true
	}
	if u, ok := v.(uint); ok {
		return strconv.FormatUint(uint64(u), 10), true, true
	}
	return "", false, false
}

// unexpected names a JSON value as serde does: integer `7`, floating point `3.5`,
// string "x", boolean `true`, null, map, sequence.
func unexpected(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean `%t`", x)
	case string:
		return "string " + strconv.Quote(x)
	case map[string]any:
		return "map"
	case []any:
		return "sequence"
	}
	if text, isInt, ok := numberText(v); ok {
		if isInt {
			return "integer `" + text + "`"
		}
		if f, ok := AsFloat(v); ok {
			text = strconv.FormatFloat(f, 'f', -1, 64)
			if !strings.ContainsAny(text, ".") && !strings.Contains(text, "Inf") && text != "NaN" {
				text += ".0"
			}
		}
		return "floating point `" + text + "`"
	}
	return fmt.Sprintf("%T", v)
}

func invalidType(v any, expected string) error {
	return fmt.Errorf("invalid type: %s, expected %s", unexpected(v), expected)
}

func invalidValue(integer string, expected string) error {
	return fmt.Errorf("invalid value: integer `%s`, expected %s", integer, expected)
}
